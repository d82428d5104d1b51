// SPDX-License-Identifier: GPL-2.0

//! Test module for the socket/TCP abstractions of the patch series: `kernel::net::sock`,
//! `kernel::net::tcp` (`read_sock`, `recv_skb`/`read_done`), `kernel::net::tcp::ulp` and
//! `kernel::net::ubuf`. `/dev/zn_sock_test` takes ioctls that act on a socket of the caller
//! (by file descriptor): report its state, attach the test ULP, consume from process context,
//! peek and consume, send zero-copy from the caller's memory. `selftests/sock_test.sh` drives
//! it over loopback TCP connections (`sock_test.py`).
//!
//! The test ULP ("zn_sock_test") counts, per socket, the bytes it consumed from `sk_data_ready`
//! in softirq and in the owner's context, and from process context, and keeps an FNV-1a hash
//! of every consumed byte, in order, so that the test can check that nothing was lost, stolen
//! or reordered.

use kernel::{
    fs::File,
    ioctl::_IOWR,
    miscdevice::{
        MiscDevice,
        MiscDeviceOptions,
        MiscDeviceRegistration, //
    },
    mm::pin::{
        Access,
        PinnedPages, //
    },
    net::{
        sock::{
            context::LockContext,
            seq_before,
            Locked,
            SocketFile,
            TcpSock,
            TcpState, //
        },
        tcp::{
            ulp::{
                Callback,
                Registration,
                Ulp,
                UlpOps, //
            },
            Piece,
            RecvChunk, //
        },
        ubuf::{
            BvecSeg,
            Ubuf,
            UbufComplete,
            UbufOps, //
        },
    },
    new_mutex,
    prelude::*,
    sync::{
        aref::ARef,
        atomic::{
            Atomic,
            Relaxed, //
        },
        Mutex,
    },
    time::{
        delay::fsleep,
        Delta, //
    },
    transmute::{
        AsBytes,
        FromBytes, //
    },
    uaccess::{
        UserPtr,
        UserSlice, //
    },
};

module! {
    type: SockTest,
    name: "zn_sock_test",
    authors: ["ZeroNIC developers"],
    description: "Tests of the socket/TCP Rust abstractions (ULP, read_sock, zero-copy send)",
    license: "GPL",
}

/// Attach mode bit: consume everything in `sk_data_ready`.
const MODE_CONSUME_IN_CALLBACK: u32 = 1;
/// Attach mode bit: report the socket readable to `poll()`.
const MODE_READABLE: u32 = 2;

/// The ioctl argument.
#[repr(C)]
#[derive(Clone, Copy)]
struct Arg {
    fd: i32,
    mode: u32,
    addr: u64,
    len: u64,
    out: [u64; 32],
}

const _: () = assert!(size_of::<Arg>() == 24 + 32 * 8);
// SAFETY: A `repr(C)` struct of integers without padding (size pinned above).
unsafe impl FromBytes for Arg {}
// SAFETY: As above.
unsafe impl AsBytes for Arg {}

const IOC_INFO: u32 = _IOWR::<Arg>(b'Z' as u32, 0x40);
const IOC_ATTACH: u32 = _IOWR::<Arg>(b'Z' as u32, 0x41);
const IOC_READ: u32 = _IOWR::<Arg>(b'Z' as u32, 0x42);
const IOC_PEEK: u32 = _IOWR::<Arg>(b'Z' as u32, 0x43);
const IOC_SEND: u32 = _IOWR::<Arg>(b'Z' as u32, 0x44);
const IOC_STATS: u32 = _IOWR::<Arg>(b'Z' as u32, 0x45);
const IOC_SETSOCKOPT: u32 = _IOWR::<Arg>(b'Z' as u32, 0x46);
const IOC_HOLD: u32 = _IOWR::<Arg>(b'Z' as u32, 0x47);

struct Stats {
    inits: Atomic<u64>,
    releases: Atomic<u64>,
    closes: Atomic<u64>,
    completions: Atomic<u64>,
    acked: Atomic<u64>,
    early: Atomic<u64>,
    zerocopy: Atomic<u64>,
    copied: Atomic<u64>,
    completed_bytes: Atomic<u64>,
    piece_errors: Atomic<u64>,
    page_pieces: Atomic<u64>,
    linear_pieces: Atomic<u64>,
    state_changes: Atomic<u64>,
    write_spaces: Atomic<u64>,
}

static STATS: Stats = Stats {
    inits: Atomic::new(0),
    releases: Atomic::new(0),
    closes: Atomic::new(0),
    completions: Atomic::new(0),
    acked: Atomic::new(0),
    early: Atomic::new(0),
    zerocopy: Atomic::new(0),
    copied: Atomic::new(0),
    completed_bytes: Atomic::new(0),
    piece_errors: Atomic::new(0),
    page_pieces: Atomic::new(0),
    linear_pieces: Atomic::new(0),
    state_changes: Atomic::new(0),
    write_spaces: Atomic::new(0),
};

fn inc(a: &Atomic<u64>, n: u64) {
    a.add(n, Relaxed);
}

/// Per-socket state of the test ULP. Fields are only written with the socket locked.
struct SockData {
    mode: u32,
    consumed_bh: Atomic<u64>,
    consumed_owned: Atomic<u64>,
    consumed_process: Atomic<u64>,
    hash: Atomic<u64>,
    data_ready: Atomic<u64>,
    state_changes: Atomic<u64>,
    last_state: Atomic<u32>,
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// Hashes the first `limit` bytes of `chunk` into `h`; returns the new hash and the number of
/// bytes hashed. Checks that the pieces add up to the chunk.
fn hash_chunk(chunk: &RecvChunk<'_>, mut h: u64, limit: u32) -> (u64, u32) {
    let mut done: u32 = 0;
    let mut total: u32 = 0;
    let mut buf = [0u8; 256];
    for piece in chunk.pieces() {
        match piece {
            Piece::Linear(bytes) => {
                inc(&STATS.linear_pieces, 1);
                total += bytes.len() as u32;
                let n = bytes.len().min((limit - done) as usize);
                h = fnv(h, &bytes[..n]);
                done += n as u32;
            }
            Piece::Page { page, offset, len } => {
                inc(&STATS.page_pieces, 1);
                total += len;
                let want = len.min(limit - done);
                let mut off = 0u32;
                while off < want {
                    let n = (want - off).min(buf.len() as u32);
                    // SAFETY: `buf` is writable for `n` bytes; the kernel writes received data
                    // before queueing it, and nobody writes it while it is queued.
                    if unsafe {
                        page.read_raw(buf.as_mut_ptr(), (offset + off) as usize, n as usize)
                    }
                    .is_err()
                    {
                        inc(&STATS.piece_errors, 1);
                        return (h, done);
                    }
                    h = fnv(h, &buf[..n as usize]);
                    off += n;
                }
                done += want;
            }
            Piece::Unreadable(len) => {
                inc(&STATS.piece_errors, 1);
                total += len;
            }
        }
        if done >= limit {
            break;
        }
    }
    if done < limit.min(chunk.len()) || (limit >= chunk.len() && total != chunk.len()) {
        inc(&STATS.piece_errors, 1);
    }
    (h, done)
}

/// Consumes up to `budget` bytes with `read_sock`, hashing them.
fn consume<C: LockContext>(l: &mut Locked<'_, C>, data: &SockData, budget: u64) -> u64 {
    let mut left = budget;
    let mut h = data.hash.load(Relaxed);
    let ret = l.read_sock(|chunk| {
        let limit = u64::from(chunk.len()).min(left) as u32;
        let (nh, n) = hash_chunk(chunk, h, limit);
        h = nh;
        left -= u64::from(n);
        n as usize
    });
    data.hash.store(h, Relaxed);
    ret.map(|n| n as u64).unwrap_or(0)
}

struct TestUlp;

static ULP_OPS: UlpOps<TestUlp> = UlpOps::new();

#[vtable]
impl Ulp for TestUlp {
    const NAME: &'static CStr = c"zn_sock_test";
    type InitArg = u32;
    type Data = SockData;

    fn init(
        sk: &mut Locked<'_, kernel::net::sock::context::Process>,
        mode: u32,
    ) -> Result<SockData> {
        if sk.state() != TcpState::Established {
            return Err(ENOTCONN);
        }
        if sk.has_user_data() || sk.repair() || sk.has_md5_or_ao() {
            return Err(EBUSY);
        }
        sk.route_ifindex()?;
        inc(&STATS.inits, 1);
        Ok(SockData {
            mode,
            consumed_bh: Atomic::new(0),
            consumed_owned: Atomic::new(0),
            consumed_process: Atomic::new(0),
            hash: Atomic::new(FNV_OFFSET),
            data_ready: Atomic::new(0),
            state_changes: Atomic::new(0),
            last_state: Atomic::new(0),
        })
    }

    fn release(_data: SockData) {
        inc(&STATS.releases, 1);
    }

    fn data_ready(data: &SockData, sk: Callback<'_>) -> bool {
        inc(&data.data_ready, 1);
        if data.mode & MODE_CONSUME_IN_CALLBACK == 0 {
            return true;
        }
        match sk {
            Callback::BhLocked(mut l) => {
                let n = consume(&mut l, data, u64::MAX);
                inc(&data.consumed_bh, n);
            }
            Callback::Owned(mut l) => {
                let n = consume(&mut l, data, u64::MAX);
                inc(&data.consumed_owned, n);
            }
        }
        false
    }

    fn write_space(_data: &SockData, _sk: &TcpSock) {
        inc(&STATS.write_spaces, 1);
    }

    fn state_change(data: &SockData, sk: Callback<'_>) {
        inc(&data.state_changes, 1);
        inc(&STATS.state_changes, 1);
        let state = match &sk {
            Callback::BhLocked(l) => l.state(),
            Callback::Owned(l) => l.state(),
        };
        data.last_state.store(state_code(state), Relaxed);
    }

    fn close(_data: &SockData, _sk: &TcpSock) {
        inc(&STATS.closes, 1);
    }

    fn readable(data: &SockData, _sk: &TcpSock) -> bool {
        data.mode & MODE_READABLE != 0
    }
}

fn state_code(s: TcpState) -> u32 {
    match s {
        TcpState::Established => 1,
        TcpState::SynSent => 2,
        TcpState::SynRecv => 3,
        TcpState::FinWait1 => 4,
        TcpState::FinWait2 => 5,
        TcpState::TimeWait => 6,
        TcpState::Close => 7,
        TcpState::CloseWait => 8,
        TcpState::LastAck => 9,
        TcpState::Listen => 10,
        TcpState::Closing => 11,
        TcpState::Other(x) => u32::from(x),
    }
}

/// Per-send state: the end of the send in sequence space, set once queued.
struct SendReq {
    sk: ARef<TcpSock>,
    end_seq: Atomic<u32>,
    len: Atomic<u64>,
}

static SEND_OPS: UbufOps<SendReq> = UbufOps::new();

#[vtable]
impl UbufComplete for SendReq {
    fn complete(self, zerocopy: bool) {
        if self.len.load(Relaxed) == 0 {
            // Nothing was queued (the send failed): not a send to account for.
            return;
        }
        inc(&STATS.completions, 1);
        inc(&STATS.completed_bytes, self.len.load(Relaxed));
        if seq_before(self.sk.snd_una_lockless(), self.end_seq.load(Relaxed)) {
            inc(&STATS.early, 1);
        } else {
            inc(&STATS.acked, 1);
        }
        inc(
            if zerocopy {
                &STATS.zerocopy
            } else {
                &STATS.copied
            },
            1,
        );
    }
}

#[pin_data]
struct TestFile {
    /// Pages sent zero-copy stay pinned until the file is closed (unpinning sleeps, so it must
    /// not happen in a completion).
    #[pin]
    pinned: Mutex<KVec<PinnedPages>>,
}

fn tcp_of(file: &SocketFile) -> Result<&TcpSock> {
    file.sk().as_tcp().ok_or(EPROTONOSUPPORT)
}

impl TestFile {
    fn info(&self, a: &mut Arg) -> Result {
        let file = SocketFile::lookup(a.fd)?;
        let sk = tcp_of(&file)?;
        a.out[24] = u64::from(sk.family());
        a.out[25] = u64::from(sk.snd_una_lockless());
        let g = sk.lock();
        let t = g.ipv4_tuple();
        a.out[0] = u64::from(state_code(g.state()));
        a.out[1] = u64::from(u32::from(t.saddr));
        a.out[2] = u64::from(t.sport);
        a.out[3] = u64::from(u32::from(t.daddr));
        a.out[4] = u64::from(t.dport);
        a.out[5] = g.bound_dev_if() as u64;
        a.out[6] = match g.route_ifindex() {
            Ok(Some(i)) => i as u64,
            Ok(None) => 0,
            Err(e) => e.to_errno() as i64 as u64,
        };
        a.out[7] = u64::from(g.rcv_nxt());
        a.out[8] = u64::from(g.copied_seq());
        a.out[9] = u64::from(g.snd_una());
        a.out[10] = u64::from(g.snd_nxt());
        a.out[11] = u64::from(g.write_seq());
        a.out[12] = g.err() as u64;
        a.out[13] = u64::from(g.shutdown());
        a.out[14] = u64::from(g.has_ulp());
        a.out[15] = u64::from(g.has_user_data());
        a.out[16] = u64::from(g.has_md5_or_ao());
        a.out[17] = u64::from(g.repair());
        if let Some(d) = ULP_OPS.data(&g) {
            a.out[18] = 1;
            a.out[19] = d.consumed_bh.load(Relaxed);
            a.out[20] = d.consumed_owned.load(Relaxed);
            a.out[21] = d.consumed_process.load(Relaxed);
            a.out[22] = d.hash.load(Relaxed);
            a.out[23] = d.data_ready.load(Relaxed);
            a.out[26] = d.state_changes.load(Relaxed);
            a.out[27] = u64::from(d.last_state.load(Relaxed));
        }
        Ok(())
    }

    fn read(&self, a: &mut Arg) -> Result {
        let file = SocketFile::lookup(a.fd)?;
        let sk = tcp_of(&file)?;
        let mut g = sk.lock();
        let (d, l) = ULP_OPS.data_mut(&mut g).ok_or(ENOENT)?;
        let n = consume(l, d, a.len);
        inc(&d.consumed_process, n);
        a.out[0] = n;
        Ok(())
    }

    fn peek(&self, a: &mut Arg) -> Result {
        let file = SocketFile::lookup(a.fd)?;
        let sk = tcp_of(&file)?;
        let mut g = sk.lock();
        let (d, l) = ULP_OPS.data_mut(&mut g).ok_or(ENOENT)?;
        let (len, seq, fin, n) = match l.recv_skb() {
            None => (0, 0, false, 0),
            Some(chunk) => {
                let limit = u64::from(chunk.len()).min(a.len) as u32;
                let (h, n) = hash_chunk(&chunk, d.hash.load(Relaxed), limit);
                d.hash.store(h, Relaxed);
                (chunk.len(), chunk.seq(), chunk.fin(), n)
            }
        };
        l.read_done(n as usize);
        inc(&d.consumed_process, u64::from(n));
        a.out[0] = u64::from(len);
        a.out[1] = u64::from(seq);
        a.out[2] = u64::from(fin);
        a.out[3] = u64::from(n);
        Ok(())
    }

    fn send(&self, a: &mut Arg) -> Result {
        let file = SocketFile::lookup(a.fd)?;
        let sk = tcp_of(&file)?;
        let len = usize::try_from(a.len)?;
        let addr = usize::try_from(a.addr)?;
        let pinned = PinnedPages::pin(addr, len, Access::Read)?;
        let pages: KVec<_> = {
            let mut v = KVec::with_capacity(pinned.page_count(), GFP_KERNEL)?;
            for i in 0..pinned.page_count() {
                v.push(pinned.page(i).ok_or(EINVAL)?, GFP_KERNEL)?;
            }
            v
        };
        let mut segs = KVec::with_capacity(pinned.page_count(), GFP_KERNEL)?;
        let mut off = pinned.offset();
        let mut left = len;
        for page in &pages {
            let n = (kernel::page::PAGE_SIZE - off).min(left);
            segs.push(
                BvecSeg {
                    page,
                    offset: off as u32,
                    len: n as u32,
                },
                GFP_KERNEL,
            )?;
            left -= n;
            off = 0;
        }
        let req = Ubuf::new(
            &SEND_OPS,
            SendReq {
                sk: sk.to_aref(),
                end_seq: Atomic::new(0),
                len: Atomic::new(0),
            },
            GFP_KERNEL,
        )?;
        let queued = {
            let mut g = sk.lock();
            g.disable_mtu_probing();
            let seq0 = g.write_seq();
            let queued = g.sendmsg_zerocopy(&req, &segs)?;
            req.end_seq.store(seq0.wrapping_add(queued as u32), Relaxed);
            req.len.store(queued as u64, Relaxed);
            a.out[1] = u64::from(seq0);
            queued
        };
        drop(req);
        drop(segs);
        drop(pages);
        self.pinned.lock().push(pinned, GFP_KERNEL)?;
        a.out[0] = queued as u64;
        Ok(())
    }

    /// Holds the socket lock for `len` milliseconds (at most a second), so that packets
    /// arriving meanwhile go to the backlog and `sk_data_ready` runs in the owner's context.
    fn hold(&self, a: &mut Arg) -> Result {
        let file = SocketFile::lookup(a.fd)?;
        let sk = tcp_of(&file)?;
        let g = sk.lock();
        fsleep(Delta::from_millis(a.len.min(1000) as i64));
        drop(g);
        Ok(())
    }

    fn setsockopt(&self, a: &mut Arg) -> Result {
        let file = SocketFile::lookup(a.fd)?;
        // `mode` = level << 16 | optname; `len` is the integer value.
        file.setsockopt_int(
            (a.mode >> 16) as i32,
            (a.mode & 0xffff) as i32,
            a.len as i32,
        )
    }
}

fn stats(a: &mut Arg) {
    let s = &STATS;
    for (i, v) in [
        &s.inits,
        &s.releases,
        &s.closes,
        &s.completions,
        &s.acked,
        &s.early,
        &s.zerocopy,
        &s.copied,
        &s.completed_bytes,
        &s.piece_errors,
        &s.page_pieces,
        &s.linear_pieces,
        &s.state_changes,
        &s.write_spaces,
    ]
    .iter()
    .enumerate()
    {
        a.out[i] = v.load(Relaxed);
    }
}

#[vtable]
impl MiscDevice for TestFile {
    type Ptr = Pin<KBox<Self>>;

    fn open(_file: &File, _misc: &MiscDeviceRegistration<Self>) -> Result<Pin<KBox<Self>>> {
        KBox::try_pin_init(
            try_pin_init!(TestFile {
                pinned <- new_mutex!(KVec::new()),
            }),
            GFP_KERNEL,
        )
    }

    fn ioctl(this: Pin<&TestFile>, _file: &File, cmd: u32, arg: usize) -> Result<isize> {
        let (mut r, mut w) =
            UserSlice::new(UserPtr::from_addr(arg), size_of::<Arg>()).reader_writer();
        let mut a: Arg = r.read()?;
        match cmd {
            IOC_INFO => this.info(&mut a)?,
            IOC_ATTACH => {
                let file = SocketFile::lookup(a.fd)?;
                ULP_OPS.attach(&file, a.mode)?;
            }
            IOC_READ => this.read(&mut a)?,
            IOC_PEEK => this.peek(&mut a)?,
            IOC_SEND => this.send(&mut a)?,
            IOC_STATS => stats(&mut a),
            IOC_SETSOCKOPT => this.setsockopt(&mut a)?,
            IOC_HOLD => this.hold(&mut a)?,
            _ => return Err(ENOTTY),
        }
        w.write(&a)?;
        Ok(0)
    }
}

#[pin_data(PinnedDrop)]
struct SockTest {
    #[pin]
    misc: MiscDeviceRegistration<TestFile>,
    _ulp: Registration<TestUlp>,
}

impl kernel::InPlaceModule for SockTest {
    fn init(_module: &'static ThisModule) -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            _ulp: Registration::register(&ULP_OPS)?,
            misc <- MiscDeviceRegistration::register(MiscDeviceOptions {
                name: c"zn_sock_test",
                mode: 0o600,
            }),
        })
    }
}

#[pinned_drop]
impl PinnedDrop for SockTest {
    fn drop(self: Pin<&mut Self>) {
        pr_info!("unloaded\n");
    }
}

#[kunit_tests(zn_sock_test)]
mod tests {
    use super::*;

    #[test]
    fn seq_compare() {
        assert!(seq_before(1, 2));
        assert!(seq_before(u32::MAX, 0));
        assert!(!seq_before(2, 2));
        assert!(kernel::net::sock::seq_after(5, u32::MAX - 3));
    }

    struct Marker(u32, &'static Atomic<u64>);

    static MARKER_OPS: UbufOps<Marker> = UbufOps::new();
    static MARKER_DONE: Atomic<u64> = Atomic::new(0);

    #[vtable]
    impl UbufComplete for Marker {
        fn complete(self, zerocopy: bool) {
            self.1.add(if zerocopy { 1 } else { 100 }, Relaxed);
        }
    }

    #[test]
    fn ubuf_lookup_and_complete() {
        // SAFETY: FFI call; a plain buffer of 128 bytes on any node.
        let skb =
            unsafe { kernel::bindings::__alloc_skb(128, kernel::bindings::GFP_KERNEL, 0, -1) };
        let Some(skb) = core::ptr::NonNull::new(skb) else {
            assert!(false);
            return;
        };
        // SAFETY: A new buffer we own.
        let skb = unsafe { kernel::net::skbuff::SkBuff::from_raw(skb) };
        let before = MARKER_DONE.load(Relaxed);
        let Ok(u) = Ubuf::new(&MARKER_OPS, Marker(42, &MARKER_DONE), GFP_KERNEL) else {
            assert!(false);
            return;
        };
        assert!(MARKER_OPS.lookup(&skb).is_none());
        assert!(SEND_OPS.lookup(&skb).is_none());
        // SAFETY: `skb` and the request are valid; the buffer takes a reference.
        unsafe { kernel::bindings::skb_zcopy_set(skb.as_raw(), u.as_raw()) };
        assert_eq!(MARKER_OPS.lookup(&skb).map(|m| m.0), Some(42));
        assert!(SEND_OPS.lookup(&skb).is_none());
        drop(u);
        assert_eq!(MARKER_DONE.load(Relaxed), before);
        drop(skb);
        assert_eq!(MARKER_DONE.load(Relaxed), before + 1);
    }
}
