//! Injected faults (`fault fatal`, `fault freeze`/`thaw` on the control
//! socket): the fatal state is the one a broken command queue causes, and a
//! frozen device does nothing at all until thawed.

mod common;

use common::*;
use zeronic_hw::cmd::*;
use zeronic_hw::regs::*;
use zeronic_hw::status::*;
use zeronic_nic::ctl::{execute, Scope};
use zeronic_nic::model::{lock, Topology};
use zeronic_nic::wire::Impair;

fn nop() -> [u8; 64] {
    let mut b = [0u8; 64];
    b[..2].copy_from_slice(&CMD_NOP.to_le_bytes());
    b
}

fn ping(tb: &mut Tb, cookie: u64) -> (usize, usize) {
    let f = tcp_frame(A_IP, B_IP, 1, 2, cookie as u32, &[7u8; 200]);
    tb.drv[0].post_rx(1, 1);
    tb.drv[0].tx_plain(0, &f, cookie);
    tb.step();
    (tb.drv[0].reap_tx(0).len(), tb.drv[0].reap_rx(1).len())
}

#[test]
fn injected_fatal_is_a_broken_command_queue() {
    let mut tb = Tb::new(Topology::TwoPort, Impair::default());
    assert_eq!(ping(&mut tb, 1), (1, 1));
    let irqs = tb.drv[0].irq.count(VEC_ASYNC);
    let r = execute(&tb.model, Scope::All, "fault fatal").unwrap();
    assert!(r.starts_with("ok\nguest g0: frozen=0 fatal=1 fatal_code=2 fatal_info=0x8 "));
    let d = &mut tb.drv[0];
    assert_ne!(d.bar.r32(REG_DEV_STATUS) & DEV_STATUS_FATAL, 0);
    assert_eq!(d.bar.r32(REG_FATAL_CODE), ST_BAD_DESC as u32);
    assert_eq!(d.bar.r32(REG_FATAL_INFO), qid(0, QK_CMDQ));
    assert_eq!(d.bar.r32(REG_CMDQ + Q_STATUS), Q_STATUS_ERROR);
    assert_eq!(d.bar.r32(REG_CMDQ + Q_ERROR), ST_BAD_DESC as u32);
    let ev = d.events();
    let ev: Vec<_> = ev.iter().map(|e| (e.code, e.info, e.detail)).collect();
    assert_eq!(
        ev,
        vec![
            (EV_QUEUE_ERROR, qid(0, QK_CMDQ), ST_BAD_DESC as u64),
            (EV_FATAL, ST_BAD_DESC as u32, qid(0, QK_CMDQ) as u64),
        ]
    );
    tb.step();
    assert!(tb.drv[0].irq.count(VEC_ASYNC) > irqs, "EV_FATAL interrupt");
    // Data path stopped, commands no longer served; the state stays.
    assert_eq!(ping(&mut tb, 2), (0, 0));
    tb.drv[0].push_cmd(nop());
    tb.step();
    assert!(tb.drv[0].reap_cmd().is_none());
    let again = execute(&tb.model, Scope::All, "fault fatal guest=g0").unwrap();
    assert!(again.contains("fatal=1 fatal_code=2"), "{again}");
    assert!(tb.drv[0].events().is_empty(), "fatal is entered once");
    // A reset clears it.
    tb.bring_up(0);
    let d = &tb.drv[0];
    assert_eq!(d.bar.r32(REG_DEV_STATUS) & DEV_STATUS_FATAL, 0);
    assert_eq!(d.bar.r32(REG_FATAL_CODE), 0);
    assert_eq!(d.bar.r32(REG_CMDQ + Q_STATUS), Q_STATUS_ENABLED);
    assert_eq!(tb.cmd(0, nop()).status, ST_OK);
    assert_eq!(ping(&mut tb, 3), (1, 1));
}

#[test]
fn frozen_device_does_nothing_until_thawed() {
    let mut tb = Tb::new(Topology::TwoGuest, Impair::default());
    let r = execute(&tb.model, Scope::All, "fault freeze guest=g1").unwrap();
    assert!(r.starts_with("ok\nguest g1: frozen=1 fatal=0 "), "{r}");
    let hb = tb.drv[1].bar.r32(REG_HEARTBEAT);
    let irqs = tb.drv[1].irq.count(vec_rx(0));
    let rx_frames = tb.drv[1].pstat(0, PSTAT_RX_FRAMES);
    // Guest b's commands and TX are not served.
    tb.drv[1].push_cmd(nop());
    let f = tcp_frame(B_IP, A_IP, 2, 1, 9, b"from b");
    tb.drv[1].tx_plain(0, &f, 9);
    // Frames from guest a reach a dead port: not received, not counted.
    tb.drv[1].post_rx(0, 4);
    tb.drv[0].tx_plain(0, &tcp_frame(A_IP, B_IP, 1, 2, 5, b"to b"), 5);
    tb.drv[0].post_rx(0, 4);
    for _ in 0..5 {
        tb.step();
    }
    assert_eq!(tb.drv[0].reap_tx(0).len(), 1, "the live side sends");
    let b = &mut tb.drv[1];
    assert_eq!(b.bar.r32(REG_HEARTBEAT), hb, "heartbeat stopped");
    assert!(b.reap_cmd().is_none());
    assert!(b.reap_tx(0).is_empty());
    assert!(b.reap_rx(0).is_empty());
    assert_eq!(b.bar.r32(port_block(0) + PORT_TXQ + Q_CONS), 0);
    assert_eq!(b.pstat(0, PSTAT_RX_FRAMES), rx_frames);
    assert_eq!(b.irq.count(vec_rx(0)), irqs);
    assert!(tb.drv[0].reap_rx(0).is_empty());
    // Guest a is unaffected.
    assert_eq!(tb.cmd(0, nop()).status, ST_OK);
    // Thaw: the queued command and frame are served.
    execute(&tb.model, Scope::All, "fault thaw guest=g1").unwrap();
    tb.step();
    assert_ne!(tb.drv[1].bar.r32(REG_HEARTBEAT), hb);
    assert_eq!(tb.drv[1].reap_cmd().map(|c| c.status), Some(ST_OK));
    assert_eq!(tb.drv[1].reap_tx(0).len(), 1);
    assert_eq!(tb.drv[0].reap_rx(0).len(), 1);
    // A reset requested while frozen happens at the thaw.
    execute(&tb.model, Scope::All, "fault freeze guest=g1").unwrap();
    tb.drv[1].bar.w32(REG_DEV_CTRL, DEV_CTRL_RESET);
    tb.step();
    assert_eq!(tb.drv[1].bar.r32(REG_DEV_CTRL), DEV_CTRL_RESET);
    let r = execute(&tb.model, Scope::All, "fault thaw").unwrap();
    assert!(
        r.contains("guest g0: frozen=0") && r.contains("guest g1: frozen=0"),
        "{r}"
    );
    tb.step();
    assert_eq!(tb.drv[1].bar.r32(REG_DEV_CTRL), 0, "reset done");
    assert!(!lock(&tb.model.guests[1].dev).frozen);
    tb.bring_up(1);
    assert_eq!(tb.cmd(1, nop()).status, ST_OK);
}
