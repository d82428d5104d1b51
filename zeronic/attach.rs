// SPDX-License-Identifier: GPL-2.0

//! Attaching and detaching flows: the `zeronic` TCP ULP.
//!
//! `ZERONIC_IOC_FLOW_ATTACH` attaches the ULP to the socket (patch 0020,
//! through the kernel's `setsockopt(TCP_ULP)`); its `init` runs with the
//! socket owned by the caller, so TCP's input waits in the backlog while the
//! NIC flow is installed at `copied_seq`. From then on the ULP's callbacks
//! drive the flow: `sk_data_ready` consumes what TCP accepted, `sk_write_space`
//! resumes pending sends, `sk_state_change` notices a reset, and `close()` of
//! the socket detaches the flow before TCP closes the connection. A plain
//! `recv()`/`send()`/`splice()` on an attached socket fails with `EOPNOTSUPP`
//! (the ULP's defaults), so nothing else consumes or injects stream bytes.
//!
//! **Served sockets.** A process may also attach its own socket with
//! `setsockopt(fd, SOL_TCP, TCP_ULP, "zeronic", 7)` ([`ZnUlp::init_by_user`],
//! patch 0039). The flow then receives into a ring of pages the driver
//! allocates ([`Mr::register_kernel`], [`ring_bytes`]) and the socket is served
//! by TCP's own code: the receipt skbs stay in TCP's queue, `sk_data_ready`
//! wakes readers, `recvmsg()` is TCP's, and after it (and whenever TCP calls
//! the ULP back) the flow moves the ring's head to what the application read
//! ([`Flow::follow_reader`]). `close()` detaches it as any flow.
//!
//! Detaching (the ioctl, `close()` of the socket, the file going away) ends
//! the flow's data path for good: no more posts; the NIC flow is removed,
//! and only once the NIC confirmed that are the posted receive segments
//! completed (`ECANCELED`); sends already in TCP complete when their bytes are
//! ACKed (or fail when the connection dies). The socket itself stays open
//! until closed, and plain I/O on it keeps failing.

use kernel::{
    cpu::CpuId,
    net::{
        sock::{
            context,
            Locked,
            SocketFile,
            TcpSock,
            TcpState, //
        },
        tcp::ulp::{
            Callback,
            Ulp,
            UlpOps, //
        },
    },
    page::PAGE_SIZE,
    prelude::*,
    sync::{
        atomic::{
            Atomic,
            Relaxed, //
        },
        Arc,
        SetOnce, //
    },
};

use crate::{
    cmdq::status_errno,
    control::{
        self,
        Control, //
    },
    cq::{
        cqe_status,
        Cq, //
    },
    defer::DropInProcess,
    flow::{
        tx::TxState,
        Flow,
        Phase,
        RxTarget,
        Tuple,
        EVENT_CREDITS, //
    },
    hw::{
        cmd::{
            CmdFlow,
            Command,
            FlowAddr6,
            FlowInstall,
            FlowRemove,
            FlowUpdate,
            Nop,
            FLOWI_EDGE,
            FLOWI_IPV6,
            FLOWI_QUEUE,
            FLOWU_CURSOR,
            FLOWU_EDGE,
            FLOW_QUEUE_SHIFT,
            FLOW_RX_RING,
            FLOW_RX_SEGMENTS,
            IPPROTO_TCP, //
        },
        regs::{
            CAP_INSTALL_EDGE,
            CAP_IPV6, //
        },
        status,
    },
    mr::{
        Mr,
        MrUse, //
    },
    uapi,
};

/// The receive ring of a socket its process attached (`TCP_ULP`): the
/// `ring_kib` module parameter, which [`check_params`] kept
/// a power of two within [`RING_KIB_MIN`]..=[`RING_KIB_MAX`] at load
/// (clamped again here). What does not fit the ring's room is delivered
/// whole on the normal path: copied, never lost.
pub(crate) fn ring_bytes() -> usize {
    let kib = crate::module_parameters::ring_kib
        .value()
        .clamp(RING_KIB_MIN, RING_KIB_MAX);
    // CAST: at most RING_KIB_MAX KiB, 64 MiB.
    (kib.next_power_of_two() as usize) << 10
}

/// Bounds of the `ring_kib` module parameter: at least 16 pages, at most
/// what one MR covers comfortably.
pub(crate) const RING_KIB_MIN: u32 = 64;
pub(crate) const RING_KIB_MAX: u32 = 64 << 10;

/// Checks the module parameter this file reads, at load.
///
/// # Errors
///
/// `EINVAL`, with a log line, unless `ring_kib` is a power of two within
/// [`RING_KIB_MIN`]..=[`RING_KIB_MAX`].
pub(crate) fn check_params() -> Result {
    let kib = crate::module_parameters::ring_kib.value();
    if !kib.is_power_of_two() || !(RING_KIB_MIN..=RING_KIB_MAX).contains(&kib) {
        pr_err!(
            "ring_kib={}: must be a power of two from {} to {}\n",
            kib,
            RING_KIB_MIN,
            RING_KIB_MAX
        );
        return Err(EINVAL);
    }
    Ok(())
}

/// The ULP's operation tables.
pub(crate) static ULP_OPS: UlpOps<ZnUlp> = UlpOps::new();

/// The `zeronic` TCP upper-layer protocol.
pub(crate) struct ZnUlp;

/// What an attach hands to the ULP's `init`.
pub(crate) struct AttachArg {
    /// Flow id in the file.
    pub(crate) id: u32,
    pub(crate) cq: Arc<Cq>,
    pub(crate) rx_mode: u32,
    /// Stream mode: the ring's region on each NIC where the file has one
    /// with the requested key, each with a use taken under the file's region
    /// table (the flow keeps its NIC's; the others, or all on failure, are
    /// given back when dropped), then its offset and size.
    pub(crate) ring: KVec<(u32, MrUse)>,
    pub(crate) ring_offset: u64,
    pub(crate) ring_size: u64,
    /// Where `init` leaves the new flow for the ioctl.
    pub(crate) out: Arc<AttachOut>,
}

/// What `init` leaves for the ioctl that attaches.
pub(crate) struct AttachOut {
    /// The new flow.
    flow: SetOnce<Arc<Flow>>,
    /// Whether `init` ran (set and read by the attaching task): an attach
    /// refused before was refused by TCP.
    init_ran: Atomic<bool>,
}

impl AttachOut {
    pub(crate) fn new() -> Self {
        Self {
            flow: SetOnce::new(),
            init_ran: Atomic::new(false),
        }
    }
}

/// The ZeroNIC port the socket's route leaves through: the NIC, its index
/// and the port number.
///
/// The route's device is compared by identity, never by interface index: an
/// index is unique only within one network namespace, and a process with its
/// own (user) namespace can give a veth there zn0's index. A port moved to
/// another namespace is still found from there.
///
/// # Errors
///
/// [`ENODEV`] if the route does not leave through a port of a bound NIC (or
/// the socket is bound to another device), [`EOPNOTSUPP`] for an IPsec route.
fn port_of(sk: &Locked<'_, context::Process>) -> Result<(Arc<Control>, u32, u32)> {
    let dev = sk.route_dev()?.ok_or(ENODEV)?;
    let bound = sk.bound_dev_if();
    // Both indexes are of the socket's own namespace.
    if bound != 0 && sk.route_ifindex()? != Some(bound) {
        return Err(ENODEV);
    }
    control::find_port(dev).ok_or(ENODEV)
}

/// A `CMD_FLOW_INSTALL` and, for an IPv6 connection, the address block it
/// names (placed by [`install_nic_flow`]).
struct Install {
    cmd: FlowInstall,
    addr6: Option<FlowAddr6>,
}

/// The NIC flow of `sk`'s connection `tuple` on `port`: receive stream
/// offset 0 at sequence number `rx_isn`, receive mode `mode` (`FLOW_RX_*`)
/// into `ring` (its MR key, offset and size; zeros in message mode).
fn install_cmd(
    sk: &Locked<'_, context::Process>,
    tuple: &Tuple,
    port: u32,
    rx_isn: u32,
    mode: u16,
    ring: (u64, u64, u32),
    queue: u32,
) -> Install {
    let (local_ip, remote_ip, mut flags, addr6) = if tuple.v6 {
        let a = FlowAddr6 {
            local_addr: tuple.local,
            remote_addr: tuple.remote,
        };
        (0, 0, FLOWI_IPV6, Some(a))
    } else {
        let (l, r) = tuple.v4_addrs();
        (l, r, 0, None)
    };
    if queue != 0 {
        // CAST: below `MAX_QP` (8): fits the bits above the shift.
        flags |= FLOWI_QUEUE | ((queue as u16) << FLOW_QUEUE_SHIFT);
    }
    let cmd = FlowInstall(CmdFlow {
        flags,
        // CAST: port < MAX_PORTS.
        port: port as u16,
        proto: u16::from(IPPROTO_TCP),
        local_ip,
        remote_ip,
        local_port: tuple.local_port,
        remote_port: tuple.remote_port,
        rx_isn,
        mode,
        ring_key: ring.0,
        ring_offset: ring.1,
        ring_size: ring.2,
        stream_off: 0,
        // The NIC reads each window TCP offers from the ACKs sent.
        rx_wscale: u16::from(sk.rcv_wscale()),
        ..Default::default()
    });
    Install { cmd, addr6 }
}

/// The notify queue pair of a flow attached now on `port`: the one whose
/// RX interrupt last came on the attaching task's CPU, where the
/// application runs (`qp_track.rs`); queue pair 0 if none is.
fn notify_queue(ctl: &Control, port: u32) -> u32 {
    ctl.port(port)
        .and_then(|p| p.qps.queue_on_cpu(CpuId::current().as_u32()))
        .unwrap_or(0)
}

/// The right edge of the window `sk` offered so far, as a stream offset
/// from `rx_isn`: no ACK may repeat it before the peer sends into it. It is
/// at or past `copied_seq`; a window TCP took back (the peer sent past it)
/// reads as negative: 0.
fn offered_edge(sk: &Locked<'_, context::Process>, rx_isn: u32) -> u64 {
    // CAST: sequence numbers wrap; the difference is the point.
    (sk.rcv_wnd_end().wrapping_sub(rx_isn) as i32).max(0) as u64
}

#[vtable]
impl Ulp for ZnUlp {
    const NAME: &'static CStr = c"zeronic";
    type InitArg = AttachArg;
    type Data = Arc<Flow>;

    fn init(sk: &mut Locked<'_, context::Process>, arg: AttachArg) -> Result<Arc<Flow>> {
        arg.out.init_ran.store(true, Relaxed);
        let (ctl, nic, port, tuple) = check_socket(sk)?;
        let rx_isn = sk.copied_seq();
        // Stream mode: the ring's region, whose use is held from here (and
        // from the ioctl before) until the flow has it, or given back when
        // this returns an error, after the NIC flow's removal.
        let mut ring = None;
        let (mode, target) = match arg.rx_mode {
            uapi::RX_MESSAGE => (FLOW_RX_SEGMENTS, RxTarget::Segments),
            uapi::RX_STREAM => {
                let mr = arg
                    .ring
                    .into_iter()
                    .find(|(n, _)| *n == nic)
                    .map(|(_, m)| m)
                    .ok_or(ENOENT)?;
                if mr.shared().access & uapi::ACCESS_LOCAL_WRITE == 0 {
                    return Err(EACCES);
                }
                if !mr.shared().contains(arg.ring_offset, arg.ring_size) {
                    return Err(EINVAL);
                }
                ring = Some(mr);
                (
                    FLOW_RX_RING,
                    RxTarget::Ring {
                        offset: arg.ring_offset,
                        size: arg.ring_size,
                    },
                )
            }
            _ => return Err(EINVAL),
        };
        let (ring_key, ring_offset, ring_size) = match (&target, &ring) {
            (RxTarget::Ring { offset, size }, Some(mr)) => (mr.shared().key, *offset, *size),
            _ => (0, 0, 0),
        };
        let queue = notify_queue(&ctl, port);
        // CAST: checked to fit u32 by the ioctl.
        let cmd = install_cmd(
            sk,
            &tuple,
            port,
            rx_isn,
            mode,
            (ring_key, ring_offset, ring_size as u32),
            queue,
        );
        let edge = offered_edge(sk, rx_isn);
        // The CQ entries of the flow's events: the work, checked after the
        // socket, its route and the ring (`docs/uapi.md`, the order of
        // FLOW_ATTACH's checks), so EAGAIN never hides why a socket cannot
        // be attached at all.
        let cq = arg.cq.clone();
        cq.reserve(EVENT_CREDITS)?;
        // The socket is owned by us: TCP's input waits in the backlog, so
        // `copied_seq` cannot move while the NIC installs the flow.
        let hw_index = install_nic_flow(&ctl, &cmd, edge, 0).map_err(|e| {
            cq.unreserve(EVENT_CREDITS);
            e
        })?;
        let flow = Flow::new(
            arg.id,
            nic,
            port,
            ctl.clone(),
            Some(arg.cq),
            false,
            sk.sock().to_aref(),
            target,
            rx_isn,
            tuple,
            (hw_index, queue),
            TxState::new(),
        );
        let flow = match flow.and_then(|f| {
            // The NIC may write the ring from now on (the socket is owned, so
            // nothing is consumed before this): the flow holds its use.
            f.inner.lock().ring = ring.take();
            ctl.add_flow(hw_index, f.clone())?;
            Ok(f)
        }) {
            Ok(f) => f,
            Err(e) => {
                remove_nic_flow(&ctl, hw_index);
                cq.unreserve(EVENT_CREDITS);
                return Err(e);
            }
        };
        // MTU probes are built without the sends' `ubuf_info` (patch 0021).
        sk.disable_mtu_probing();
        // Urgent data is part of the stream, as the NIC placed it
        // (docs/uapi.md, "Urgent data"); `consume()` reads through its mark.
        sk.set_urgent_inline();
        arg.out.flow.populate(flow.clone());
        Ok(flow)
    }

    fn init_by_user(sk: &mut Locked<'_, context::Process>) -> Result<Arc<Flow>> {
        let (ctl, nic, port, tuple) = check_socket(sk)?;
        // Stream offset 0 is the first byte the application has not read;
        // what TCP queued before is served by TCP, and the NIC's cursor
        // starts past it (`held`).
        let rx_isn = sk.copied_seq();
        // Sequence numbers wrap; the difference is the point.
        let held = u64::from(sk.rcv_nxt().wrapping_sub(rx_isn));
        let edge = offered_edge(sk, rx_isn);
        let ring_bytes = ring_bytes();
        let kring = Mr::register_kernel(ctl.clone(), nic, ring_bytes / PAGE_SIZE)?;
        let shared = kring.shared().ok_or(EIO)?.clone();
        let ring_use = MrUse::take(&shared);
        // Dropped (invalidated, then freed) in process context, whatever
        // context lets go of the flow last.
        let kring = DropInProcess::new(kring)?;
        // CAST: at most 64 MiB, which fits u32 and u64.
        let ring_size = ring_bytes as u64;
        let queue = notify_queue(&ctl, port);
        // CAST: at most 64 MiB.
        let cmd = install_cmd(
            sk,
            &tuple,
            port,
            rx_isn,
            FLOW_RX_RING,
            (shared.key, 0, ring_bytes as u32),
            queue,
        );
        // On failure the ring goes back before this returns (its charge
        // too, so that the caller may try again at once): the NIC flow is
        // removed first, then the region invalidated, then freed.
        let give_back = |ring_use: MrUse, kring: DropInProcess<Mr>| {
            drop(ring_use);
            kring.drop_now();
        };
        let hw_index = match install_nic_flow(&ctl, &cmd, edge, held) {
            Ok(i) => i,
            Err(e) => {
                give_back(ring_use, kring);
                return Err(e);
            }
        };
        let flow = match Flow::new(
            0,
            nic,
            port,
            ctl.clone(),
            None,
            true,
            sk.sock().to_aref(),
            RxTarget::Ring {
                offset: 0,
                size: ring_size,
            },
            rx_isn,
            tuple,
            (hw_index, queue),
            TxState::new(),
        ) {
            Ok(f) => f,
            Err(e) => {
                remove_nic_flow(&ctl, hw_index);
                give_back(ring_use, kring);
                return Err(e);
            }
        };
        {
            let mut inner = flow.inner.lock();
            inner.ring = Some(ring_use);
            inner.kring = Some(kring);
            inner.nic_cursor = held;
            inner.nic_confirmed = held;
        }
        if let Err(e) = ctl.add_flow(hw_index, flow.clone()) {
            remove_nic_flow(&ctl, hw_index);
            let (ring_use, kring) = {
                let mut inner = flow.inner.lock();
                (inner.ring.take(), inner.kring.take())
            };
            drop(ring_use);
            if let Some(k) = kring {
                k.drop_now();
            }
            return Err(e);
        }
        Ok(flow)
    }

    fn recvmsg_done(data: &Arc<Flow>, _sk: &TcpSock) {
        // The application read: the ring's head follows.
        {
            let mut sk = data.sock.lock();
            data.consume(&mut sk);
        }
        // And the flow's entries come to the CPU it reads on.
        data.follow_cpu();
    }

    fn release(data: Arc<Flow>) {
        // The socket is being destroyed: the flow was detached at close, or
        // the connection died without one. Nothing here may sleep.
        drop(data);
    }

    fn data_ready(data: &Arc<Flow>, sk: Callback<'_>) -> bool {
        match sk {
            Callback::BhLocked(mut l) => data.consume(&mut l),
            Callback::Owned(mut l) => data.consume(&mut l),
        }
        // A served socket's readers are woken as TCP's; nobody reads any
        // other attached socket (its plain reads fail).
        data.served
    }

    fn write_space(data: &Arc<Flow>, _sk: &TcpSock) {
        data.write_space();
    }

    fn state_change(data: &Arc<Flow>, sk: Callback<'_>) {
        match sk {
            Callback::BhLocked(l) => data.state_changed(&l),
            Callback::Owned(l) => data.state_changed(&l),
        }
    }

    fn close(data: &Arc<Flow>, _sk: &TcpSock) {
        data.detach();
    }
}

/// Checks that `sk` (owned by the caller) may be attached, and returns the
/// NIC and port its route leaves through and its connection.
///
/// # Errors
///
/// - `EAFNOSUPPORT` if the socket is neither IPv4 nor IPv6, or its packets
///   are IPv6 ones and the NIC lacks `CAP_IPV6`; `ENOTCONN` if not
///   established.
/// - `EEXIST` if another upper layer has the socket.
/// - `EOPNOTSUPP` for TCP-MD5/AO, repair mode, or a port whose header/data split is off.
/// - `ENODEV`, `EOPNOTSUPP` as [`port_of`].
fn check_socket(sk: &Locked<'_, context::Process>) -> Result<(Arc<Control>, u32, u32, Tuple)> {
    let tuple = Tuple::of(sk)?;
    if !matches!(sk.state(), TcpState::Established) {
        return Err(ENOTCONN);
    }
    if sk.has_user_data() {
        return Err(EEXIST);
    }
    if sk.has_md5_or_ao() || sk.repair() {
        return Err(EOPNOTSUPP);
    }
    let (ctl, nic, port) = port_of(sk)?;
    if tuple.v6 && ctl.identity.caps & CAP_IPV6 == 0 {
        return Err(EAFNOSUPPORT);
    }
    // `ethtool -G <port> tcp-data-split off` refuses new flows.
    ctl.flow_attach_allowed(port)?;
    Ok((ctl, nic, port, tuple))
}

/// Installs the NIC flow `cmd` with window edge `edge` and, if `cursor` is
/// not 0, its cursor there (bytes TCP holds already); returns its index.
/// Process context.
///
/// # Errors
///
/// - `ENOSPC` if the Flow Table is full; other refusals as [`status_errno`].
/// - `EIO` if the NIC did not complete the commands or refused the edge or
///   cursor (the flow is removed again then).
/// - `ENODEV` if the NIC is being unbound.
fn install_nic_flow(ctl: &Control, install: &Install, edge: u64, cursor: u64) -> Result<u32> {
    // A NIC of version 2.5 takes the edge with the install (`FLOWI_EDGE`):
    // one command fewer per attach. An edge of 2^31 or more is given after.
    let edge_in_install = ctl.identity.caps & CAP_INSTALL_EDGE != 0 && edge < 1 << 31;
    let (hw_index, set) = ctl.with_bound(|dev, cmds| {
        let mut cmd = install.cmd;
        if edge_in_install {
            cmd.0.flags |= FLOWI_EDGE;
            // CAST: below 2^31 (checked above).
            cmd.0.flow = edge as u32;
        }
        let done = match &install.addr6 {
            // An IPv6 flow's addresses are in a block the NIC reads while
            // it executes the command (docs/hardware.md §15).
            Some(a) => {
                cmds.exec_with_block(dev, &mut cmd, &a.encode(), |c, addr| c.0.set_addr6(addr))?
            }
            None => cmds.exec(&cmd)?,
        };
        if done.status != status::ST_OK {
            return Err(status_errno(done.status));
        }
        let hw_index = u32::try_from(FlowInstall::output(&done)).map_err(|_| EIO)?;
        // Before any room is posted, so nothing is placed without it.
        let mut set = edge_in_install || {
            let update = FlowUpdate {
                flags: FLOWU_EDGE,
                flow: hw_index,
                stream_off: edge,
            };
            cmds.exec(&update).is_ok_and(|d| d.status == status::ST_OK)
        };
        if set && cursor != 0 {
            let update = FlowUpdate {
                flags: FLOWU_CURSOR,
                flow: hw_index,
                stream_off: cursor,
            };
            set = cmds.exec(&update).is_ok_and(|d| d.status == status::ST_OK);
        }
        Ok((hw_index, set))
    })?;
    if set {
        return Ok(hw_index);
    }
    // A NIC that refuses a valid edge or cursor is broken: give the flow
    // back rather than leave it unable to place.
    remove_nic_flow(ctl, hw_index);
    Err(EIO)
}

/// Removes NIC flow `hw_index`, waiting for the NIC (process context).
/// `true` if the NIC confirmed (or was reset, which removed it too).
fn remove_nic_flow(ctl: &Control, hw_index: u32) -> bool {
    exec_confirms(ctl, &FlowRemove { flow: hw_index })
}

/// Waits for the commands submitted before now to complete (process
/// context): the NIC executes commands in order, so a `CMD_NOP` completing
/// says they did. `true` as for [`remove_nic_flow`].
fn nic_caught_up(ctl: &Control) -> bool {
    exec_confirms(ctl, &Nop)
}

/// Executes `cmd`: `true` if the NIC completed it or its reset completed.
/// May wait for the unbind's reset (process context).
fn exec_confirms<C: Command>(ctl: &Control, cmd: &C) -> bool {
    match ctl.with_bound(|_, cmds| cmds.exec(cmd)) {
        // Any answer: the flow is not in the table any more.
        Ok(_) => true,
        // Unbinding or unbound: its reset empties the Flow Table, if it
        // completes; until it did, nothing is confirmed.
        Err(e) if e == ENODEV => ctl.reset_confirmed(),
        Err(_) => false,
    }
}

/// Attaches the socket of `file` as flow `arg.id`. Process context.
///
/// # Errors
///
/// - `EPROTONOSUPPORT` if the socket is not TCP, `EAFNOSUPPORT` if not IPv4.
/// - `ENOTCONN` if the socket is not established.
/// - `EEXIST` if another upper layer has the socket (a ULP, sockmap, KCM).
/// - `EBUSY` if too many attaches are in progress at once.
/// - `EOPNOTSUPP` for TCP-MD5/AO, repair mode, an IPsec route, or a port whose
///   header/data split is off.
/// - `ENODEV` if the route does not leave through a port of a bound NIC, the
///   socket is bound to another device, or the NIC is being unbound.
/// - `ENOENT` (stream mode) if the ring's region is not on the flow's NIC.
/// - `EACCES` if the ring's region lacks `LOCAL_WRITE`; `EINVAL` if the ring exceeds it.
/// - `EAGAIN` if the CQ has no free entries for the flow's events.
/// - `ENOSPC` if the NIC's Flow Table is full; other refusals as [`status_errno`].
/// - `EIO` if the NIC did not complete the commands, or answered them wrongly.
/// - `ENOMEM` if the flow cannot be allocated.
pub(crate) fn attach(file: &SocketFile, arg: AttachArg) -> Result<Arc<Flow>> {
    let out = arg.out.clone();
    // `init` reserves the CQ entries of the flow's events, and gives them
    // back if it fails.
    if let Err(e) = ULP_OPS.attach(file, arg) {
        // Refused before `init` ran: TCP found that another layer (a
        // sockmap) replaced the socket's operations. Another upper layer
        // has the socket, as with a ULP attached before (`docs/uapi.md`).
        if e == EOPNOTSUPP && !out.init_ran.load(Relaxed) {
            return Err(EEXIST);
        }
        return Err(e);
    }
    let flow = SetOnce::as_ref(&out.flow).ok_or(EIO)?.clone();
    // Bytes TCP queued before the attach: `sk_data_ready` fires only for new
    // ones, and none may come while the queue holds the window shut. A
    // stream-mode flow has its ring now; a message-mode one takes them when
    // segments are posted.
    let mut sk = flow.sock.lock();
    flow.consume(&mut sk);
    drop(sk);
    Ok(flow)
}

impl Flow {
    /// Ends the flow's data path (see the module documentation). Process
    /// context, without the socket lock; idempotent.
    pub(crate) fn detach(self: &Arc<Self>) {
        {
            let mut inner = self.inner.lock();
            if inner.phase == Phase::Detached {
                return;
            }
            // Nothing is consumed or posted from now on (a reset flow goes
            // on too: its segments may still be posted).
            inner.phase = Phase::Detached;
        }
        self.drop_pending_sends();
        if !self.served {
            // Give the window back to TCP: nothing posts any more, and a
            // window held at the old room would leave the peer probing it
            // (and both sockets, with their module references, alive)
            // after the application closed. After the phase change under
            // `inner`: a `consume()` holding the socket lock that saw the
            // flow attached bounds the window before this, never after.
            self.sock.lock().unbound_rcv_window();
        }
        self.control.remove_flow(self.hw_index, &**self);
        let (removed, given) = {
            let inner = self.inner.lock();
            (inner.nic_removed, inner.remove_given)
        };
        // A reset's removal went to the NIC: the index may be another
        // flow's once it executed, so wait for it rather than remove again.
        let confirmed = removed
            || if given {
                nic_caught_up(&self.control)
            } else {
                remove_nic_flow(&self.control, self.hw_index)
            };
        let mut inner = self.inner.lock();
        inner.nic_removed |= confirmed;
        if confirmed {
            self.flush_segments(&mut inner, cqe_status(ECANCELED));
        } else {
            pr_err!(
                "flow {}: NIC did not confirm the flow's removal; its receive segments stay posted\n",
                self.id
            );
        }
        // Status EIO: the NIC may still write what the flow could (its ring
        // or segments); the application must not hand that memory to
        // anything else (docs/uapi.md).
        let cqe = crate::cq::Cqe {
            stream_off: inner.rx_done,
            flow: self.id,
            opcode: uapi::CQE_FLOW,
            status: if confirmed { 0 } else { cqe_status(EIO) },
            flags: uapi::CQE_F_DETACHED,
            ..Default::default()
        };
        drop(inner);
        let _ = self.complete(&cqe, crate::cq::Credit::Reserved);
        // The EOF/reset credit, if never used.
        let mut inner = self.inner.lock();
        if !inner.event_posted {
            inner.event_posted = true;
            if let Some(cq) = &self.cq {
                cq.unreserve(1);
            }
        }
        // A served socket's ring: invalidated on the NIC, then freed (or held
        // until the NIC is reset if it does not confirm), now.
        let kring = inner.kring.take();
        drop(inner);
        if let Some(k) = kring {
            k.drop_now();
        }
    }
}
