//! 802.1Q: a frame whose EtherType is 0x8100 (one tag) may be VLAN_HLEN
//! bytes longer than MTU + 14, on TX and on RX; tagged frames always take
//! the normal path (flows are untagged IPv4/TCP only).

mod common;

use common::*;
use zeronic_hw::cmd::*;
use zeronic_hw::regs::*;
use zeronic_hw::status::*;
use zeronic_nic::frame::Frame;
use zeronic_nic::model::{lock, Topology};
use zeronic_nic::wire::Impair;

/// Inserts an 802.1Q tag (VID 5) after the MAC addresses.
fn tagged(frame: &[u8]) -> Vec<u8> {
    let mut f = frame[..12].to_vec();
    f.extend_from_slice(&ETH_P_8021Q.to_be_bytes());
    f.extend_from_slice(&5u16.to_be_bytes());
    f.extend_from_slice(&frame[12..]);
    f
}

/// An untagged IPv4/TCP frame carrying exactly `mtu` bytes of IP packet.
fn full_frame(mtu: usize) -> Vec<u8> {
    tcp_frame(A_IP, B_IP, 4000, 5001, 0, &vec![9u8; mtu - 40])
}

fn tx_one(tb: &mut Tb, f: &[u8]) -> u16 {
    tb.drv[0].tx_plain(0, f, 1);
    tb.step();
    let c = tb.drv[0].reap_tx(0);
    assert_eq!(c.len(), 1);
    c[0].status
}

#[test]
fn a_tagged_frame_at_full_mtu_is_carried_both_ways() {
    let mut tb = Tb::new(Topology::TwoGuest, Impair::default());
    tb.drv[1].post_rx(0, 8);
    let plain = full_frame(9000);
    assert_eq!(plain.len(), 9014);
    let t = tagged(&plain);
    assert_eq!(t.len() as u32, 9000 + ETH_HLEN + VLAN_HLEN);
    assert_eq!(tx_one(&mut tb, &t), ST_OK);
    let rx = tb.drv[1].reap_rx(0);
    assert_eq!(rx.len(), 1);
    assert_eq!(rx[0].0.status, ST_OK);
    assert_eq!(rx[0].1, t, "delivered whole, tag included");
    assert_eq!(rx[0].0.flags, 0, "not parsed as IPv4/TCP");
    // One byte more is too big, tagged or not; an untagged frame gets no
    // allowance.
    let mut t1 = t.clone();
    t1.push(0);
    assert_eq!(tx_one(&mut tb, &t1), ST_TOO_BIG);
    let mut p1 = plain.clone();
    p1.push(0);
    assert_eq!(tx_one(&mut tb, &p1), ST_TOO_BIG);
    // Received from the wire the same way (MTU of the receiving port).
    let now = tb.now;
    let mut d = lock(&tb.model.guests[1].dev);
    d.rx_frame(0, &mut Frame::owned(t1), now);
    d.rx_frame(0, &mut Frame::owned(p1), now);
    d.rx_frame(0, &mut Frame::owned(t.clone()), now);
    d.rx_flush(now);
    drop(d);
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_MALFORMED), 2);
    assert_eq!(tb.drv[1].reap_rx(0).len(), 1);
}

#[test]
fn a_tagged_flow_packet_takes_the_normal_path() {
    let mut tb = Tb::new(Topology::TwoGuest, Impair::default());
    tb.drv[1].post_rx(0, 8);
    let r = tb.drv[1].alloc(65_536);
    let rk = tb.reg_mr(1, r, 65_536, MR_ACCESS_LOCAL_WRITE).unwrap();
    let flow = tb.install(1, flow_b(0, 0)).unwrap();
    tb.post(1, flow, rk, 0, 65_536);
    let t = tagged(&tcp_frame(A_IP, B_IP, 4000, 5001, 0, &[1u8; 500]));
    assert_eq!(tx_one(&mut tb, &t), ST_OK);
    let rx = tb.drv[1].reap_rx(0);
    assert_eq!(rx.len(), 1);
    assert_eq!((rx[0].0.flags, rx[0].0.flow), (0, 0));
    assert!(tb.drv[1].reap_hdr(0).is_empty());
    assert_eq!(tb.drv[1].pstat(0, PSTAT_RX_PLACED_BYTES), 0);
}

#[test]
fn a_merge_header_with_a_tag_is_malformed() {
    let mut tb = Tb::new(Topology::TwoGuest, Impair::default());
    let s = tb.drv[0].alloc(4096);
    let sk = tb.reg_mr(0, s, 4096, MR_ACCESS_LOCAL_READ).unwrap();
    let hdr = tagged(&tcp_hdr(A_IP, B_IP, 4000, 5001, 0, 1, 0x10));
    let ha = tb.drv[0].alloc(256);
    tb.drv[0].tx_merge(0, &hdr, ha, sk, 0, 100, 0);
    tb.step();
    assert_eq!(tb.drv[0].reap_tx(0)[0].status, ST_MALFORMED);
}
