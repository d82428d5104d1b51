//! Property tests: hostile descriptor, command and frame bytes never panic
//! the model and never make it write guest memory outside its rings, RX
//! buffers and the registered, posted placement region.

mod common;

use common::*;
use proptest::prelude::*;
use zeronic_hw::cmd::*;
use zeronic_hw::desc::*;
use zeronic_nic::frame::Frame;
use zeronic_nic::model::{lock, Topology};
use zeronic_nic::wire::Impair;

const SMALL_RAM: usize = 8 << 20;

fn snapshot(tb: &Tb, g: usize, from: u64) -> Vec<u8> {
    let mut v = vec![0u8; SMALL_RAM - from as usize];
    tb.drv[g].mem.read(from, &mut v).unwrap();
    v
}

/// Biases a random u64 toward interesting addresses.
fn addr() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        0u64..SMALL_RAM as u64 + 4096,
        Just(SMALL_RAM as u64 - 8),
        Just(u64::MAX - 3),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    #[test]
    fn hostile_tx_and_commands_stay_in_bounds(
        raw in proptest::collection::vec(any::<[u8; 64]>(), 1..12),
        addrs in proptest::collection::vec(addr(), 12),
        ops in proptest::collection::vec(0u16..9, 12),
        keys in proptest::collection::vec(any::<u64>(), 12),
    ) {
        let mut tb = Tb::with_ram(Topology::TwoPort, Impair::default(), SMALL_RAM);
        let fence = tb.drv[0].next;
        let src = tb.drv[0].alloc(65_536);
        tb.drv[0].mem.write(src, &[0x33; 65_536]).unwrap();
        let key = tb.reg_mr(0, src, 65_536, MR_ACCESS_ALL).unwrap();
        let before = snapshot(&tb, 0, fence);
        for (i, r) in raw.iter().enumerate() {
            let mut d = TxDesc::decode(r);
            d.opcode = ops[i] % 4;
            d.buf_addr = addrs[i];
            if i % 2 == 0 {
                d.mr_key = if i % 4 == 0 { key } else { keys[i] };
                d.flags &= TXF_ALL;
                d.rsvd0 = 0;
                d.rsvd1 = 0;
                d.rsvd2 = 0;
            }
            tb.drv[0].tx(i % 2, d);
            let mut c = *r;
            c[0..2].copy_from_slice(&ops[i].to_le_bytes());
            if ops[i] == CMD_MR_INVAL {
                c[8..16].copy_from_slice(&keys[i].to_le_bytes());
            }
            if ops[i] != CMD_MR_REG {
                tb.drv[0].push_cmd(c);
            }
        }
        tb.step();
        tb.step();
        // Everything the driver did not hand to the NIC for writing is intact.
        prop_assert!(snapshot(&tb, 0, fence) == before);
        prop_assert_eq!(tb.drv[0].reap_tx(0).len() + tb.drv[0].reap_tx(1).len(), raw.len());
    }

    #[test]
    fn hostile_frames_write_only_posted_space(
        frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..400), 1..16),
        seqs in proptest::collection::vec(any::<u32>(), 16),
        lens in proptest::collection::vec(0u16..3000, 16),
    ) {
        let mut tb = Tb::with_ram(Topology::TwoGuest, Impair::default(), SMALL_RAM);
        tb.drv[1].post_rx(0, 64);
        let fence = tb.drv[1].next;
        let r = tb.drv[1].alloc(16_384);
        let rk = tb.reg_mr(1, r, 16_384, MR_ACCESS_LOCAL_WRITE).unwrap();
        let flow = tb.install(1, flow_b(0, 1000)).unwrap();
        tb.post(1, flow, rk, 0, 8192);
        tb.post(1, flow, rk, 12_288, 4096);
        let before = snapshot(&tb, 1, fence);
        for (i, raw) in frames.iter().enumerate() {
            // Half the frames are well-formed flow packets at random
            // sequence numbers; half are random bytes behind a real header.
            let pay = vec![0x77u8; lens[i] as usize];
            let mut f = tcp_frame(A_IP, B_IP, 4000, 5001, 1000u32.wrapping_add(seqs[i] % 20_000), &pay);
            if i % 2 == 1 {
                let n = raw.len().min(f.len());
                f[..n].copy_from_slice(&raw[..n]);
                if n > 14 { f[12] = 8; f[13] = 0; }
            }
            let now = tb.now;
            let mut fr = Frame::owned(f);
            lock(&tb.model.guests[1].dev).rx_frame(0, &mut fr, now);
        }
        let now = tb.now;
        lock(&tb.model.guests[1].dev).rx_flush(now);
        let after = snapshot(&tb, 1, fence);
        let (lo, hi) = ((r - fence) as usize, (r - fence) as usize + 16_384);
        prop_assert!(after[..lo] == before[..lo], "write below the region");
        prop_assert!(after[hi..] == before[hi..], "write above the region");
        // The unposted hole [8192, 12288) of the region is never written.
        prop_assert!(after[lo + 8192..lo + 12_288] == before[lo + 8192..lo + 12_288]);
        for (e, _) in tb.drv[1].reap_hdr(0) {
            prop_assert!(e.cursor <= 12_288, "cursor {} beyond posted space", e.cursor);
        }
    }
}
