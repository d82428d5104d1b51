// SPDX-License-Identifier: GPL-2.0

//! `/dev/zeronic`, the control device.
//!
//! Applications open it to query NICs and register memory (the ABI is
//! `uapi/linux/zeronic.h`, described in `docs/uapi.md`). Each open file owns a
//! [`ControlFile`]; the regions it registers belong to it and are released
//! when the file goes away (close, exit, kill), whatever the state of the NIC.
//!
//! The node is world-accessible (0666) as RDMA's uverbs nodes are: what a user
//! may do through it is bounded by per-user limits (`RLIMIT_MEMLOCK` on the
//! user's `locked_vm`, and a share of each NIC's MR Table), not by file
//! permissions, however the file is shared.
//!
//! Lock order: `ControlFile::mrs` -> `control::NICS` -> `Control::inner`.

use kernel::{
    fs::File,
    miscdevice::{
        MiscDevice,
        MiscDeviceOptions,
        MiscDeviceRegistration, //
    },
    mm::virt::VmaNew,
    new_mutex,
    prelude::*,
    seq_file::SeqFile,
    seq_print,
    sync::{
        atomic::Relaxed,
        Mutex, //
    },
    task::Pid,
    uaccess::{
        UserPtr,
        UserSlice, //
    },
};

use crate::{
    cdev_zc::ZcFiles,
    control,
    mr::{
        Mr,
        MR_MAX_BYTES, //
    },
    uapi,
};

/// Name of the device node under `/dev`.
pub(crate) const NAME: &CStr = c"zeronic";

/// ABI version of `uapi/linux/zeronic.h` this driver implements
/// (`ZERONIC_UAPI_VERSION` there).
pub(crate) const UAPI_VERSION: u32 = 3;

/// Permission bits of `/dev/zeronic` (see the module documentation).
const MODE: u16 = 0o666;

/// Returns the initializer that registers `/dev/zeronic`.
pub(crate) fn register() -> impl PinInit<MiscDeviceRegistration<ControlFile>, Error> {
    MiscDeviceRegistration::register(MiscDeviceOptions {
        name: NAME,
        mode: MODE,
    })
}

/// State of one open file of `/dev/zeronic`.
///
/// Lifetime: created by `open`, dropped by `release` (last close of the file,
/// including on process exit or kill), which drops every region left. It holds
/// no reference to a bound device: regions reach their NIC through its
/// `Control`, which fails cleanly once the NIC is unbound.
#[pin_data]
pub(crate) struct ControlFile {
    /// Thread-group id of the process that opened the file, shown in fdinfo
    /// so that a file passed to another process can be traced to its owner.
    owner_tgid: Pid,
    /// Completion queues and flows of this file (`cdev_zc.rs`).
    #[pin]
    zc: ZcFiles,
    /// Regions registered through this file.
    #[pin]
    mrs: Mutex<KVec<Mr>>,
}

impl ControlFile {
    fn query(&self, arg: usize) -> Result<isize> {
        let size = size_of::<uapi::Query>();
        let (mut reader, mut writer) =
            UserSlice::new(UserPtr::from_addr(arg), size).reader_writer();
        let input: uapi::Query = reader.read()?;
        let (ctl, num_nics) = control::lookup(input.nic)?;
        let id = &ctl.identity;
        let mut out = uapi::Query {
            nic: input.nic,
            num_nics,
            hw_version: id.version,
            caps: id.caps,
            num_ports: id.ports,
            max_mtu: id.max_mtu,
            mr_capacity: id.mr_capacity,
            mr_in_use: ctl.mr_in_use.load(Relaxed),
            mr_max_bytes: MR_MAX_BYTES,
            pinned_pages: ctl.pinned_pages.load(Relaxed),
            flow_capacity: id.flow_capacity,
            ms_per_flow: id.ms_per_flow,
            mr_user_max: ctl.mr_user_max,
            mr_user_in_use: ctl.share_of(current!().uid()),
            user_locked_pages: kernel::mm::pin::current_user_locked_pages(),
            held_pages: ctl.held_pages.load(Relaxed),
            flows_in_use: ctl.flows_in_use(),
            ..Default::default()
        };
        for (info, snap) in out
            .ports
            .iter_mut()
            .zip(ctl.ports.iter())
            .take(id.ports as usize)
        {
            info.ifindex = snap.ifindex.load(Relaxed);
            info.mtu = snap.mtu.load(Relaxed);
            info.link = snap.link.load(Relaxed);
        }
        writer.write(&out)?;
        Ok(0)
    }

    fn mr_reg(&self, arg: usize) -> Result<isize> {
        let size = size_of::<uapi::MrReg>();
        let (mut reader, mut writer) =
            UserSlice::new(UserPtr::from_addr(arg), size).reader_writer();
        let mut req: uapi::MrReg = reader.read()?;
        let (ctl, _) = control::lookup(req.nic)?;
        let mut mrs = self.mrs.lock();
        // Reserve the table slot first: a failure after registering would
        // otherwise have to undo it on the NIC.
        mrs.reserve(1, GFP_KERNEL)?;
        let mr = Mr::register(ctl, req.nic, req.addr, req.length, req.access)?;
        // The NIC never repeats a key (hardware spec §10); one that does is
        // broken, and two regions answering to one key would be ambiguous.
        if mrs.iter().any(|m| m.nic == mr.nic && m.key == mr.key) {
            pr_err!("NIC {} handed out key {:#x} twice\n", mr.nic, mr.key);
            return Err(EIO);
        }
        req.key = mr.key;
        // Report the key before committing: if the user's buffer went away,
        // the registration is undone (dropping `mr`) and nothing leaks.
        writer.write(&req)?;
        mrs.push(mr, GFP_KERNEL)?;
        Ok(0)
    }

    fn mr_dereg(&self, arg: usize) -> Result<isize> {
        let size = size_of::<uapi::MrDereg>();
        let req: uapi::MrDereg = UserSlice::new(UserPtr::from_addr(arg), size)
            .reader()
            .read()?;
        if req.reserved != 0 {
            return Err(EINVAL);
        }
        let mr = {
            let mut mrs = self.mrs.lock();
            let pos = mrs
                .iter()
                .position(|m| m.nic == req.nic && m.key == req.key)
                .ok_or(ENOENT)?;
            if mrs.get(pos).is_some_and(Mr::in_use) {
                return Err(EBUSY);
            }
            mrs.remove(pos)?
        };
        // Invalidate, unmap and unpin outside the table lock.
        mr.deregister()?;
        Ok(0)
    }
}

#[vtable]
impl MiscDevice for ControlFile {
    type Ptr = Pin<KBox<Self>>;

    fn open(_file: &File, _misc: &MiscDeviceRegistration<Self>) -> Result<Pin<KBox<Self>>> {
        let owner_tgid = current!().tgid();
        KBox::try_pin_init(
            try_pin_init!(ControlFile {
                owner_tgid,
                zc <- ZcFiles::new(),
                mrs <- new_mutex!(KVec::new()),
            }),
            GFP_KERNEL,
        )
    }

    fn release(device: Pin<KBox<Self>>, _file: &File) {
        // Flows first (they use the regions and the CQs), then the CQs; the
        // regions go with the file.
        device.zc.release();
        drop(device);
    }

    fn ioctl(this: Pin<&ControlFile>, _file: &File, cmd: u32, arg: usize) -> Result<isize> {
        match cmd {
            uapi::IOC_QUERY => this.query(arg),
            uapi::IOC_MR_REG => this.mr_reg(arg),
            uapi::IOC_MR_DEREG => this.mr_dereg(arg),
            uapi::IOC_CQ_CREATE => this.zc.cq_create(arg),
            uapi::IOC_CQ_DESTROY => this.zc.cq_destroy(arg),
            uapi::IOC_FLOW_ATTACH => this.zc.flow_attach(&this.mrs, arg),
            uapi::IOC_FLOW_DETACH => this.zc.flow_detach(arg),
            uapi::IOC_POST => this.zc.post(&this.mrs, arg),
            uapi::IOC_STREAM_CONSUME => this.zc.stream_consume(arg),
            uapi::IOC_FLOW_QUERY => this.zc.flow_query(arg),
            _ => Err(ENOTTY),
        }
    }

    fn mmap(this: Pin<&ControlFile>, _file: &File, vma: &VmaNew) -> Result {
        this.zc.mmap(vma)
    }

    fn show_fdinfo(this: Pin<&ControlFile>, m: &SeqFile, _file: &File) {
        seq_print!(m, "zeronic-uapi:\t{}\n", UAPI_VERSION);
        seq_print!(m, "zeronic-owner-tgid:\t{}\n", this.owner_tgid);
        let mrs = this.mrs.lock();
        let pages: u64 = mrs.iter().map(Mr::npages).sum();
        seq_print!(m, "zeronic-mrs:\t{}\n", mrs.len());
        seq_print!(m, "zeronic-pinned-pages:\t{}\n", pages);
    }
}
