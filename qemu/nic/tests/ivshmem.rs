//! The ivshmem server protocol and daemon plumbing, with this test playing
//! QEMU: handshake, BAR2 identity through the received fd, a doorbell that
//! runs a command, the interrupt eventfd, disconnect + reconnect, and the
//! control socket.

use std::io::IoSliceMut;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, UnixAddr};
use zeronic_hw::cmd::*;
use zeronic_hw::regs::*;
use zeronic_hw::status::ST_OK;
use zeronic_nic::mem::{Bar2, GuestMem};
use zeronic_nic::model::{Model, Topology};
use zeronic_nic::server::{self, GuestCfg};
use zeronic_nic::wire::Impair;

fn recv(sock: &UnixStream) -> (i64, Option<OwnedFd>) {
    let mut buf = [0u8; 8];
    let mut iov = [IoSliceMut::new(&mut buf)];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    let msg = recvmsg::<UnixAddr>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::empty(),
    )
    .unwrap();
    let mut fd = None;
    for c in msg.cmsgs().unwrap() {
        if let ControlMessageOwned::ScmRights(fds) = c {
            // SAFETY: the kernel just installed this fd for us.
            fd = fds.first().map(|&f| unsafe { OwnedFd::from_raw_fd(f) });
        }
    }
    assert_eq!(msg.bytes, 8);
    (i64::from_le_bytes(buf), fd)
}

struct Client {
    _sock: UnixStream,
    bar: Bar2,
    doorbells: Vec<OwnedFd>,
    irqs: Vec<OwnedFd>,
}

fn connect(path: &PathBuf, vectors: usize) -> Client {
    let t = Instant::now();
    let sock = loop {
        match UnixStream::connect(path) {
            Ok(s) => break s,
            Err(_) if t.elapsed() < Duration::from_secs(5) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => panic!("connect: {e}"),
        }
    };
    let (version, fd) = recv(&sock);
    assert!(version == 0 && fd.is_none(), "protocol version 0");
    let (id, fd) = recv(&sock);
    assert!(fd.is_none());
    assert_eq!(id, 1);
    let (m, shm) = recv(&sock);
    assert_eq!(m, -1);
    let bar = Bar2::from_file(&std::fs::File::from(shm.expect("shm fd"))).unwrap();
    let mut doorbells = Vec::new();
    for _ in 0..vectors {
        let (peer, fd) = recv(&sock);
        assert_eq!(peer, 0, "NIC doorbells are peer 0");
        doorbells.push(fd.expect("doorbell fd"));
    }
    let mut irqs = Vec::new();
    for _ in 0..vectors {
        let (peer, fd) = recv(&sock);
        assert_eq!(peer, 1, "own vectors");
        irqs.push(fd.expect("irq fd"));
    }
    Client {
        _sock: sock,
        bar,
        doorbells,
        irqs,
    }
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "timeout waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn qemu_protocol_doorbell_interrupt_and_reconnect() {
    let dir = std::env::temp_dir().join(format!("zn-ivshmem-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ram = dir.join("ram");
    std::fs::File::create(&ram)
        .unwrap()
        .set_len(16 << 20)
        .unwrap();
    let cfg = GuestCfg::parse(&format!("a={}", ram.display()), &dir).unwrap();
    assert_eq!(cfg.socket, dir.join("a.sock"));
    let cfg_b = GuestCfg::parse(
        &format!("b={},socket={}/bee.sock", ram.display(), dir.display()),
        &dir,
    )
    .unwrap();
    let model = Arc::new(
        Model::new(
            Topology::TwoGuest,
            &["a".into(), "b".into()],
            |g| Ok(Arc::new(Bar2::memfd(&format!("t{g}"))?)),
            Impair::default(),
            1,
        )
        .unwrap(),
    );
    server::start(model.clone(), &[cfg.clone(), cfg_b], 8).unwrap();
    let c = connect(&cfg.socket, 8);
    assert_eq!(c.bar.r32(REG_MAGIC), ZN_MAGIC);
    assert_eq!(c.bar.r32(REG_VERSION), ZN_VERSION);
    assert_eq!(c.bar.r32(REG_CAPS), ZN_CAPS);
    assert_eq!(c.bar.r32(REG_NUM_PORTS), 1);
    wait_until("DMA window", || {
        c.bar.r32(REG_DEV_STATUS) & DEV_STATUS_DMA_OK != 0
    });
    assert_eq!(c.bar.r32(REG_DMA_WINDOW_MB), 16);

    // Program the command queues in "guest RAM" (the file) and ring DB_CMD.
    let mem = GuestMem::from_file(&ram).unwrap();
    for (reg, base, size) in [(REG_CMDQ, 0x10000u64, 16u32), (REG_CMDCQ, 0x20000, 16)] {
        c.bar.w64(reg + Q_BASE, base);
        c.bar.w32(reg + Q_SIZE, size);
        c.bar.w32(reg + Q_CTRL, Q_CTRL_ENABLE);
    }
    c.bar.w32(vec_block(VEC_ASYNC) + VEC_MASK, 0);
    let nop = CmdHeader {
        opcode: CMD_NOP,
        flags: 0,
        cookie: 77,
    };
    let mut b = [0u8; 64];
    b[..8].copy_from_slice(&nop.encode());
    mem.write(0x10000, &b).unwrap();
    wait_until("queues enabled", || {
        c.bar.r32(REG_CMDCQ + Q_STATUS) == Q_STATUS_ENABLED
    });
    c.bar.w32(REG_CMDQ + Q_PROD, 1);
    nix::unistd::write(&c.doorbells[DB_CMD as usize], &1u64.to_ne_bytes()).unwrap();
    wait_until("command completion", || c.bar.r32(REG_CMDCQ + Q_PROD) == 1);
    let comp = CmdCompletion::decode(&mem.read_array::<16>(0x20000).unwrap());
    assert_eq!(
        (comp.cookie, comp.opcode, comp.status),
        (77, CMD_NOP, ST_OK)
    );
    // The interrupt arrives on the guest's eventfd for vector 0.
    let mut v = [0u8; 8];
    wait_until("MSI-X eventfd", || {
        nix::unistd::read(&c.irqs[VEC_ASYNC as usize], &mut v).is_ok()
    });
    assert!(c.bar.r64(REG_GSTATS + 8 * GSTAT_DOORBELLS) >= 1);

    // Disconnect (VM power-off): the device resets; a new QEMU reconnects.
    drop(c);
    let c2 = connect(&cfg.socket, 8);
    // The model counts the reset when it notices the disconnect, which may
    // be after the new connection is served: wait for the count itself.
    wait_until("reset after reconnect", || {
        c2.bar.r32(REG_CMDQ + Q_STATUS) == 0 && c2.bar.r64(REG_GSTATS + 8 * GSTAT_RESETS) >= 2
    });
    assert_eq!(c2.bar.r32(REG_MAGIC), ZN_MAGIC);

    // Control socket: run-time impairments and stats.
    let ctl = dir.join("ctl.sock");
    zeronic_nic::ctl::start(model.clone(), &ctl, zeronic_nic::ctl::Scope::All).unwrap();
    let r = zeronic_nic::ctl::send(&ctl, "wire loss=5 delay=100us rate=10gbit").unwrap();
    assert!(r.starts_with("ok"), "{r}");
    assert!(
        r.contains("wire a:0->b:0 loss=5 reorder=0 dup=0 delay=100us rate=10000000000"),
        "{r}"
    );
    let r = zeronic_nic::ctl::send(&ctl, "wire from=b:0 dup=2").unwrap();
    assert!(r.contains("wire b:0->a:0 loss=5 reorder=0 dup=2"), "{r}");
    assert!(r.contains("wire a:0->b:0 loss=5 reorder=0 dup=0"), "{r}");
    let r = zeronic_nic::ctl::send(&ctl, "wire loss=500").unwrap();
    assert!(r.starts_with("error"), "{r}");
    let r = zeronic_nic::ctl::send(&ctl, "stats").unwrap();
    assert!(r.contains("port a:0 tx_frames=0"), "{r}");

    // One long-lived connection (what a guest's virtio-serial port gets):
    // several commands, each reply ended by the END line, while another
    // long-lived connection (the other guest's) stays open and idle.
    let _idle = std::os::unix::net::UnixStream::connect(&ctl).unwrap();
    {
        use std::io::{BufRead, BufReader, Write};
        let s = std::os::unix::net::UnixStream::connect(&ctl).unwrap();
        // A server that serves one connection at a time never answers.
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut lines = BufReader::new(&s).lines();
        let mut reply = |cmd: &str| -> Vec<String> {
            (&s).write_all(format!("{cmd}\n").as_bytes()).unwrap();
            let mut out = Vec::new();
            for l in lines.by_ref() {
                let l = l.unwrap();
                if l == zeronic_nic::ctl::END {
                    return out;
                }
                out.push(l);
            }
            panic!("connection closed before the end of the reply to {cmd:?}");
        };
        let r = reply("wire loss=0 dup=0 delay=0us rate=0");
        assert_eq!(r[0], "ok");
        assert!(
            r.iter()
                .any(|l| l.contains("wire b:0->a:0 loss=0 reorder=0 dup=0")),
            "{r:?}"
        );
        let r = reply("bogus");
        assert!(r[0].starts_with("error"), "{r:?}");
        let r = reply("stats");
        assert_eq!(r[0], "ok");
    }

    // Guest a's own socket (its virtio-serial port): scoped to guest a.
    let a_ctl = dir.join("a.ctl");
    zeronic_nic::ctl::start(model.clone(), &a_ctl, zeronic_nic::ctl::Scope::Guest(0)).unwrap();
    let r = zeronic_nic::ctl::send(&a_ctl, "fault freeze guest=b").unwrap();
    assert!(r.starts_with("error: guest \"b\" is outside"), "{r}");
    let r = zeronic_nic::ctl::send(&a_ctl, "fault status").unwrap();
    assert!(
        r.starts_with("ok\nguest a: frozen=0") && !r.contains("guest b"),
        "{r}"
    );
    // At most MAX_CONNS connections per socket; the next one is refused.
    let max = zeronic_nic::ctl::MAX_CONNS;
    let held: Vec<_> = (0..max)
        .map(|_| std::os::unix::net::UnixStream::connect(&a_ctl).unwrap())
        .collect();
    // Each held connection is served (a reply proves its thread counts).
    for s in &held {
        use std::io::{BufRead, BufReader, Write};
        (&*s).write_all(b"help\n").unwrap();
        let mut l = String::new();
        BufReader::new(s).read_line(&mut l).unwrap();
        assert_eq!(l, "ok\n");
    }
    let mut extra = std::os::unix::net::UnixStream::connect(&a_ctl).unwrap();
    let mut r = String::new();
    std::io::Read::read_to_string(&mut extra, &mut r).unwrap();
    assert_eq!(r, format!("error: more than {max} connections\n.\n"));
    drop(held);
    wait_until("connections released", || {
        zeronic_nic::ctl::send(&a_ctl, "stats").is_ok_and(|r| r.starts_with("ok"))
    });
    let _ = std::fs::remove_dir_all(&dir);
}
