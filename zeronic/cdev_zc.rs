// SPDX-License-Identifier: GPL-2.0

//! The zero-copy calls of `/dev/zeronic` (uapi version 3): completion
//! queues, flow attach and detach, work requests, stream consumption, flow
//! queries, and `mmap` of completion queues. `docs/uapi.md` is the contract.
//!
//! Per file: its CQs and flows live in [`ZcFiles`]; both belong to the file
//! and go with it (flows are detached first, then CQs dropped, then the
//! file's regions released, see `cdev.rs`). A flow also lives on with its
//! socket (the ULP holds it) until the socket is destroyed, detached.
//!
//! Lock order: a file's flow table, then its CQ table, then its region
//! table; none of them is held while taking a socket lock or sleeping on
//! the NIC, except the region table during registration (`cdev.rs`). `mmap`
//! takes the CQ table under the mmap lock, so no user copy (which may fault)
//! happens under the CQ table.

use kernel::{
    mm::virt::VmaNew,
    net::sock::{
        SocketFile,
        SEND_SHUTDOWN, //
    },
    new_mutex,
    prelude::*,
    sync::{
        atomic::{
            Atomic,
            Relaxed, //
        },
        Arc,
        Mutex, //
    },
    uaccess::{
        UserPtr,
        UserSlice, //
    },
};

use crate::{
    attach::{
        self,
        AttachArg, //
    },
    cq::Cq,
    flow::{
        Flow,
        RxTarget, //
    },
    mr::{
        Mr,
        MrShared,
        MrUse, //
    },
    uapi,
};

/// Byte distance between the mmap offsets of two CQs (a CQ maps at most
/// 513 pages).
const CQ_MMAP_STRIDE: u64 = 1 << 24;

/// CQs one file may hold: far more than flows need (a NIC has 1024 flows),
/// and few enough that the table's linear lookups stay short. Memory is
/// bounded by each CQ's charge to `RLIMIT_MEMLOCK` (`cq.rs`); this bounds a
/// `CAP_IPC_LOCK` caller's table too.
pub(crate) const MAX_CQS: usize = 1024;

/// Ring sizes a stream-mode flow accepts: a power of two from a page up to
/// what a completion's `len` (u32) can report.
const RING_MIN: u64 = 4096;
const RING_MAX: u64 = 1 << 31;

/// The zero-copy objects of one open file.
#[pin_data]
pub(crate) struct ZcFiles {
    next_id: Atomic<u32>,
    #[pin]
    flows: Mutex<KVec<Arc<Flow>>>,
    #[pin]
    cqs: Mutex<KVec<Arc<Cq>>>,
}

/// Reads the argument of `T` at `arg` and returns a writer for it too.
fn read_arg<T: kernel::transmute::FromBytes>(
    arg: usize,
) -> Result<(T, kernel::uaccess::UserSliceWriter)> {
    let (mut reader, writer) =
        UserSlice::new(UserPtr::from_addr(arg), size_of::<T>()).reader_writer();
    Ok((reader.read()?, writer))
}

impl ZcFiles {
    pub(crate) fn new() -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            next_id: Atomic::new(1),
            flows <- new_mutex!(KVec::new(), "zeronic::file::flows"),
            cqs <- new_mutex!(KVec::new(), "zeronic::file::cqs"),
        }? Error)
    }

    fn id(&self) -> u32 {
        self.next_id.fetch_add(1, Relaxed)
    }

    fn flow(&self, id: u32) -> Result<Arc<Flow>> {
        self.flows
            .lock()
            .iter()
            .find(|f| f.id == id)
            .cloned()
            .ok_or(ENOENT)
    }

    /// Detaches every flow and retires every CQ (the file goes away, and
    /// with it every mapping of its CQs). Process context.
    pub(crate) fn release(&self) {
        let flows = core::mem::take(&mut *self.flows.lock());
        for f in flows.iter() {
            f.detach();
        }
        drop(flows);
        // A detached flow may outlive the file, with its socket; the CQ's
        // pages and their charge do not (`cq.rs`, "Accounting").
        let cqs = core::mem::take(&mut *self.cqs.lock());
        for cq in cqs.iter() {
            cq.retire();
        }
    }

    /// `ENOSPC` if the file holds [`MAX_CQS`] CQs (`cqs` is the locked table).
    fn cq_room(cqs: &KVec<Arc<Cq>>) -> Result {
        if cqs.len() >= MAX_CQS {
            return Err(ENOSPC);
        }
        Ok(())
    }

    /// `ZERONIC_IOC_CQ_CREATE`: creates a CQ and says where to map it.
    ///
    /// # Errors
    ///
    /// - `EFAULT` if the argument cannot be read or written back.
    /// - `EINVAL` if `reserved` is set, or as [`Cq::new`] for `entries`.
    /// - `EBADF` if `eventfd` is neither -1 nor an eventfd.
    /// - `ENOMEM` beyond `RLIMIT_MEMLOCK`, or out of memory.
    /// - `ENOSPC` if the file holds [`MAX_CQS`] CQs.
    pub(crate) fn cq_create(&self, arg: usize) -> Result<isize> {
        let (mut req, mut writer) = read_arg::<uapi::CqCreate>(arg)?;
        if req.reserved != 0 {
            return Err(EINVAL);
        }
        Self::cq_room(&self.cqs.lock())?;
        let id = self.id();
        let cq = Cq::new(id, req.entries, req.eventfd)?;
        req.cq = id;
        req.mmap_offset = u64::from(id) * CQ_MMAP_STRIDE;
        // CAST: usize -> u64 is lossless.
        req.mmap_size = cq.map_size() as u64;
        // The user copy may fault, which takes the mmap lock: not under the
        // table's lock, which `mmap` takes under the mmap lock.
        writer.write(&req)?;
        let mut cqs = self.cqs.lock();
        // Again, under the lock: another thread may have added CQs since.
        Self::cq_room(&cqs)?;
        cqs.push(cq, GFP_KERNEL)?;
        Ok(0)
    }

    /// `ZERONIC_IOC_CQ_DESTROY`: removes a CQ from the file.
    ///
    /// # Errors
    ///
    /// - `EFAULT` if the argument cannot be read.
    /// - `EINVAL` if `reserved` is set.
    /// - `ENOENT` if the file has no CQ `cq`.
    /// - `EBUSY` while a flow of the file uses the CQ.
    pub(crate) fn cq_destroy(&self, arg: usize) -> Result<isize> {
        let (req, _) = read_arg::<uapi::CqDestroy>(arg)?;
        if req.reserved != 0 {
            return Err(EINVAL);
        }
        let flows = self.flows.lock();
        let mut cqs = self.cqs.lock();
        let pos = cqs.iter().position(|c| c.id == req.cq).ok_or(ENOENT)?;
        if flows
            .iter()
            .any(|f| f.cq.as_ref().is_some_and(|c| c.id == req.cq))
        {
            return Err(EBUSY);
        }
        let cq = cqs.remove(pos)?;
        drop((cqs, flows));
        // Its mappings, if any, keep the pages (and their charge) until
        // unmapped; a flow detached earlier that still completes sends
        // keeps only the `Cq`, whose entries now go nowhere.
        cq.retire();
        Ok(0)
    }

    /// `mmap` of the CQ whose offset `vma` starts at.
    ///
    /// # Errors
    ///
    /// - `EINVAL` if the offset is not that of a CQ of the file.
    /// - `EINVAL`, `ENOMEM`, `EBUSY`, `EFAULT` as [`Cq::map_into`].
    pub(crate) fn mmap(&self, vma: &VmaNew) -> Result {
        // CAST: usize -> u64 is lossless.
        let off = (vma.pgoff() as u64) << kernel::page::PAGE_SHIFT;
        if off % CQ_MMAP_STRIDE != 0 {
            return Err(EINVAL);
        }
        let id = u32::try_from(off / CQ_MMAP_STRIDE).map_err(|_| EINVAL)?;
        let cq = self
            .cqs
            .lock()
            .iter()
            .find(|c| c.id == id)
            .cloned()
            .ok_or(EINVAL)?;
        cq.map_into(vma)
    }

    /// `ZERONIC_IOC_FLOW_ATTACH`: attaches a TCP socket as a flow of the file.
    ///
    /// # Errors
    ///
    /// - `EFAULT` if the argument cannot be read or written back.
    /// - `EINVAL` for reserved fields, `rx_mode`, ring fields in message mode, or `ring_size`.
    /// - `ENOENT` if the file has no CQ `cq`, or (stream mode) no region `ring_key`.
    /// - `EBADF`, `ENOTSOCK` if `sockfd` is not an open socket.
    /// - `ENOMEM` if memory runs out.
    /// - Any error of [`attach::attach`].
    pub(crate) fn flow_attach(&self, mrs: &Mutex<KVec<Mr>>, arg: usize) -> Result<isize> {
        let (mut req, mut writer) = read_arg::<uapi::FlowAttach>(arg)?;
        if req.reserved0 != 0 || req.reserved1 != 0 {
            return Err(EINVAL);
        }
        let cq = self
            .cqs
            .lock()
            .iter()
            .find(|c| c.id == req.cq)
            .cloned()
            .ok_or(ENOENT)?;
        let mut ring = KVec::new();
        match req.rx_mode {
            uapi::RX_MESSAGE => {
                if req.ring_key != 0 || req.ring_offset != 0 || req.ring_size != 0 {
                    return Err(EINVAL);
                }
            }
            uapi::RX_STREAM => {
                if !req.ring_size.is_power_of_two()
                    || !(RING_MIN..=RING_MAX).contains(&req.ring_size)
                {
                    return Err(EINVAL);
                }
                // Uses taken under the table, as for posts: MR_DEREG is EBUSY
                // from now on (the attach gives back those it does not keep).
                let mrs = mrs.lock();
                ring.reserve(mrs.len(), GFP_KERNEL)?;
                for m in mrs.iter().filter(|m| m.key == req.ring_key) {
                    if let Some(shared) = m.shared() {
                        // Cannot fail: reserved above.
                        let _ = ring.push((m.nic, MrUse::take(shared)), GFP_KERNEL);
                    }
                }
                drop(mrs);
                if ring.is_empty() {
                    return Err(ENOENT);
                }
            }
            _ => return Err(EINVAL),
        }
        let sock = SocketFile::lookup(req.sockfd)?;
        let id = self.id();
        let out = Arc::new(attach::AttachOut::new(), GFP_KERNEL)?;
        let flow = attach::attach(
            &sock,
            AttachArg {
                id,
                cq,
                rx_mode: req.rx_mode,
                ring,
                ring_offset: req.ring_offset,
                ring_size: req.ring_size,
                out,
            },
        )?;
        req.flow = id;
        req.nic = flow.nic;
        req.port = flow.port;
        let mut flows = self.flows.lock();
        let stored = flows.push(flow.clone(), GFP_KERNEL);
        drop(flows);
        if let Err(e) = stored
            .map_err(Error::from)
            .and_then(|()| writer.write(&req))
        {
            self.flows.lock().retain(|f| !Arc::ptr_eq(f, &flow));
            flow.detach();
            return Err(e);
        }
        Ok(0)
    }

    /// `ZERONIC_IOC_FLOW_DETACH`: detaches a flow of the file.
    ///
    /// # Errors
    ///
    /// - `EFAULT` if the argument cannot be read.
    /// - `EINVAL` if `reserved` is set.
    /// - `ENOENT` if the file has no flow `flow`.
    pub(crate) fn flow_detach(&self, arg: usize) -> Result<isize> {
        let (req, _) = read_arg::<uapi::FlowDetach>(arg)?;
        if req.reserved != 0 {
            return Err(EINVAL);
        }
        let flow = {
            let mut flows = self.flows.lock();
            let pos = flows.iter().position(|f| f.id == req.flow).ok_or(ENOENT)?;
            flows.remove(pos)?
        };
        flow.detach();
        Ok(0)
    }

    /// `ZERONIC_IOC_POST`: posts work requests to a flow, in order.
    ///
    /// # Errors
    ///
    /// - `EFAULT` if the argument or the requests cannot be read, or `posted` written back.
    /// - `EINVAL` if `reserved` is set, or `count` is 0 or above `POST_MAX`.
    /// - `ENOENT` if the file has no flow `flow`.
    /// - `ENOMEM` if the requests cannot be copied.
    /// - The errno of the first refused request (after writing `posted`): `EINVAL`, `ENOENT`,
    ///   `EACCES`, `ERANGE`, `EPIPE`, `EAGAIN`, `ENOMEM`, `EIO`, as `docs/uapi.md` lists.
    pub(crate) fn post(&self, mrs: &Mutex<KVec<Mr>>, arg: usize) -> Result<isize> {
        let (mut req, mut writer) = read_arg::<uapi::Post>(arg)?;
        if req.reserved != 0 || req.count == 0 || req.count > uapi::POST_MAX {
            return Err(EINVAL);
        }
        let flow = self.flow(req.flow)?;
        // CAST: at most POST_MAX.
        let n = req.count as usize;
        let size = n * size_of::<uapi::Wr>();
        let mut reader = UserSlice::new(UserPtr::from_addr(req.wrs as usize), size).reader();
        let mut wrs = KVec::with_capacity(n, GFP_KERNEL)?;
        for _ in 0..n {
            wrs.push(reader.read::<uapi::Wr>()?, GFP_KERNEL)?;
        }
        let mut posted = 0u32;
        let mut first_err = None;
        {
            let mut sk = flow.sock.lock();
            for wr in wrs.iter() {
                match post_one(&flow, mrs, &mut sk, wr) {
                    Ok(()) => posted += 1,
                    Err(e) => {
                        first_err = Some(e);
                        break;
                    }
                }
            }
            // Data that waited for room may go now.
            flow.consume(&mut sk);
        }
        // The application is here: its flow's entries come here too.
        flow.follow_cpu();
        req.posted = posted;
        writer.write(&req)?;
        match first_err {
            Some(e) => Err(e),
            None => Ok(0),
        }
    }

    /// `ZERONIC_IOC_STREAM_CONSUME`: gives consumed ring space back to a stream flow.
    ///
    /// # Errors
    ///
    /// - `EFAULT` if the argument cannot be read.
    /// - `EINVAL` if `reserved` is set, the flow is not in stream mode, or `stream_off` is
    ///   before the ring's head or past what was reported.
    /// - `ENOENT` if the file has no flow `flow`.
    pub(crate) fn stream_consume(&self, arg: usize) -> Result<isize> {
        let (req, _) = read_arg::<uapi::StreamConsume>(arg)?;
        if req.reserved != 0 {
            return Err(EINVAL);
        }
        self.flow(req.flow)?.consume_ring(req.stream_off)?;
        Ok(0)
    }

    /// `ZERONIC_IOC_FLOW_QUERY`: reports a flow's state and counters.
    ///
    /// # Errors
    ///
    /// - `EFAULT` if the argument cannot be read or written back.
    /// - `ENOENT` if the file has no flow `flow`.
    pub(crate) fn flow_query(&self, arg: usize) -> Result<isize> {
        let (mut req, mut writer) = read_arg::<uapi::FlowQuery>(arg)?;
        self.flow(req.flow)?.query(&mut req);
        writer.write(&req)?;
        Ok(0)
    }
}

/// The region of `key` on the flow's NIC in the file, with the use counted.
fn use_region(mrs: &Mutex<KVec<Mr>>, nic: u32, key: u64) -> Result<Arc<MrShared>> {
    let mrs = mrs.lock();
    let mr = mrs
        .iter()
        .find(|m| m.nic == nic && m.key == key)
        .ok_or(ENOENT)?;
    let shared = mr.shared().ok_or(ENOENT)?;
    // Counted under the table's lock, so that MR_DEREG sees it.
    shared.users.add(1, Relaxed);
    Ok(shared.clone())
}

/// Posts one work request (the socket locked by the caller).
fn post_one(
    flow: &Arc<Flow>,
    mrs: &Mutex<KVec<Mr>>,
    sk: &mut kernel::net::sock::Locked<'_, kernel::net::sock::context::Process>,
    wr: &uapi::Wr,
) -> Result {
    if wr.len == 0 || wr.flags != 0 {
        return Err(EINVAL);
    }
    let (need, send) = match wr.opcode {
        uapi::WR_SEND => (uapi::ACCESS_LOCAL_READ, true),
        uapi::WR_RECV => {
            if !matches!(flow.target, RxTarget::Segments) {
                return Err(EINVAL);
            }
            (uapi::ACCESS_LOCAL_WRITE, false)
        }
        _ => return Err(EINVAL),
    };
    let mr = use_region(mrs, flow.nic, wr.key)?;
    // From here `mr`'s use is released by whatever holds it (a dropped Arc
    // does not: the segment or send does, or the error path below).
    let release = |e: Error| {
        mr.users.fetch_sub(1, Relaxed);
        e
    };
    if mr.access & need == 0 {
        return Err(release(EACCES));
    }
    if !mr.contains(wr.offset, u64::from(wr.len)) {
        return Err(release(ERANGE));
    }
    let ended = send && sk.shutdown() & SEND_SHUTDOWN != 0;
    flow.may_post(send, ended).map_err(release)?;
    // A flow of the file always has its CQ.
    let cq = flow.cq.as_ref().ok_or(EINVAL).map_err(release)?;
    cq.reserve(1).map_err(release)?;
    // Both take over `mr`'s use, and give it back if they fail.
    let res = if send {
        flow.post_send(sk, wr.wr_id, mr.clone(), wr.offset, wr.len)
    } else {
        flow.post_recv(mr.clone(), wr)
    };
    if res.is_err() {
        cq.unreserve(1);
    }
    res
}
