//! ZACC (`docs/accel.md`) without QEMU: identity and reset, each command,
//! every bounds and error case, the counters, the aperture and the peer
//! DMA resolver.

mod za;

use std::sync::Arc;

use za::*;
use zeronic_hw::accel::*;
use zeronic_hw::regs::{Q_PROD, Q_STATUS, Q_STATUS_ERROR};
use zeronic_nic::accel::aperture::PeerMap;
use zeronic_nic::accel::dma_space::{DmaSpace, GuestDma, Target};
use zeronic_nic::accel::stream::{fnv1a, Stream};
use zeronic_nic::accel::Accel;

fn stream(seed: u64, off: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    Stream::Prng(seed).generate(off, &mut v);
    v
}

fn ok(z: &mut Za, c: [u8; 64]) -> u64 {
    let d = z.cmd(c);
    assert_eq!(d.status, ZA_ST_OK, "{d:?}");
    d.result
}

fn status(z: &mut Za, c: [u8; 64]) -> u16 {
    let d = z.cmd(c);
    if d.status != ZA_ST_OK && d.status != ZA_ST_MISMATCH {
        assert_eq!(d.result, 0, "result 0 on error");
    }
    d.status
}

/// FNV of all device memory, host side (to show an error wrote nothing).
fn hbm_hash(z: &Za) -> u64 {
    fnv1a(ZA_FNV_OFFSET_BASIS, &z.hbm(0, HBM as usize))
}

#[test]
fn identity_and_reset() {
    let mut z = Za::new();
    assert_eq!(z.r32(ZA_REG_CAPS), ZA_CAPS);
    assert_eq!(z.r32(ZA_REG_NUM_VECTORS), ZA_NUM_VECTORS);
    assert_eq!(z.dev.bar.r64(ZA_REG_HBM_OFFSET), ZA_HBM_OFFSET);
    assert_eq!(z.dev.bar.r64(ZA_REG_HBM_SIZE), HBM);
    assert_eq!(z.dev.bar.r64(ZA_REG_BAR2_SIZE), BAR);
    assert_eq!(z.r32(ZA_REG_MAX_RING), ZA_MAX_RING);
    assert_eq!(z.r32(ZA_REG_COPY_MAX_PAGES), ZA_COPY_MAX_PAGES);
    assert_eq!(z.r32(ZA_REG_DMA_WINDOW_MB), (RAM >> 20) as u32);
    assert_eq!(z.r32(ZA_REG_DEV_STATUS), ZA_STATUS_READY | ZA_STATUS_DMA_OK);
    let resets = z.stat(ZA_STAT_RESETS);
    assert!(resets >= 1);
    ok(&mut z, fill(0, 4096, 1, 0));
    z.w32(ZA_REG_SCRATCH, 0x1234);
    z.reset();
    assert_eq!(z.r32(ZA_REG_SCRATCH), 0);
    assert_eq!(z.r32(ZA_REG_CMDQ + Q_STATUS), 0, "queues off");
    assert_eq!(z.stat(ZA_STAT_RESETS), resets + 1);
    assert_eq!(z.stat(ZA_STAT_CMD_OK), 0, "BAR stats restart");
    assert_eq!(z.stat(ZA_STAT_FILL_BYTES), 0);
    // ... the model's own counters do not.
    assert_eq!(z.dev.counters.get(ZA_STAT_FILL_BYTES), 4096);
    // Device memory survives a reset.
    assert_eq!(z.hbm(0, 4096), stream(1, 0, 4096));
    // Bad sizes are refused.
    for bad in [3 << 20, ZA_MIN_BAR2_SIZE / 2, ZA_MAX_BAR2_SIZE * 2, 6 << 20] {
        assert!(Accel::new("bad", bad).is_err(), "{bad:#x}");
    }
    assert!(Accel::new("min", ZA_MIN_BAR2_SIZE).is_ok());
}

#[test]
fn fill_and_verify_prng() {
    let mut z = Za::new();
    // Unaligned device offset, stream offset and length.
    ok(&mut z, fill(13, 100_003, 0xfeed, 5));
    assert_eq!(z.hbm(13, 100_003), stream(0xfeed, 5, 100_003));
    assert_eq!(z.hbm(0, 13), vec![0; 13], "nothing before");
    assert_eq!(z.hbm(100_016, 64), vec![0; 64], "nothing after");
    ok(&mut z, verify(13, 100_003, 0xfeed, 5));
    // Any window verifies on its own.
    ok(&mut z, verify(13 + 70_000, 999, 0xfeed, 5 + 70_000));
    // A corrupted byte is found exactly.
    z.dev
        .hbm
        .write(13 + 77_777, &[!z.hbm(13 + 77_777, 1)[0]])
        .unwrap();
    let d = z.cmd(verify(13, 100_003, 0xfeed, 5));
    assert_eq!((d.status, d.result), (ZA_ST_MISMATCH, 77_777));
    // Wrong seed, wrong stream offset.
    assert_eq!(status(&mut z, verify(13, 64, 0xbeef, 5)), ZA_ST_MISMATCH);
    assert_eq!(status(&mut z, verify(13, 64, 0xfeed, 6)), ZA_ST_MISMATCH);
    assert_eq!(z.stat(ZA_STAT_VERIFY_MISMATCH), 3);
    assert_eq!(z.stat(ZA_STAT_FILL_BYTES), 100_003);
    // The whole of device memory, both ends included.
    ok(&mut z, fill(0, HBM, 7, 0));
    ok(&mut z, verify(0, HBM, 7, 0));
    ok(&mut z, verify(HBM - 1, 1, 7, HBM - 1));
}

#[test]
fn fill_and_verify_pattern() {
    let mut z = Za::new();
    let p = 0x0807_0605_0403_0201u64;
    ok(&mut z, pattern(ZA_CMD_FILL, 100, 21, p, 3));
    assert_eq!(
        z.hbm(100, 21),
        [4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8]
    );
    ok(&mut z, pattern(ZA_CMD_VERIFY, 100, 21, p, 3));
    let d = z.cmd(pattern(ZA_CMD_VERIFY, 100, 21, p, 4));
    assert_eq!((d.status, d.result), (ZA_ST_MISMATCH, 0));
    // Zeroing with pattern 0.
    ok(&mut z, pattern(ZA_CMD_FILL, 0, HBM, 0, 0));
    assert_eq!(
        hbm_hash(&z),
        fnv1a(ZA_FNV_OFFSET_BASIS, &vec![0; HBM as usize])
    );
}

#[test]
fn hash_matches_host_and_chains() {
    let mut z = Za::new();
    ok(&mut z, fill(0, 1 << 20, 42, 0));
    let host = z.hbm(1000, 300_000);
    let whole = ok(&mut z, hash(1000, 300_000, ZA_FNV_OFFSET_BASIS));
    assert_eq!(whole, fnv1a(ZA_FNV_OFFSET_BASIS, &host));
    // In two pieces, the second continuing from the first.
    let h1 = ok(&mut z, hash(1000, 123_457, ZA_FNV_OFFSET_BASIS));
    let h2 = ok(&mut z, hash(1000 + 123_457, 300_000 - 123_457, h1));
    assert_eq!(h2, whole);
    assert_eq!(z.stat(ZA_STAT_HASH_BYTES), 600_000);
}

#[test]
fn copy_host_to_device_and_back() {
    let mut z = Za::new();
    // Scattered, out-of-order, repeated pages; the range starts mid-page.
    let pages = [POOL + 5 * 4096, POOL, POOL + 9 * 4096, POOL];
    let src: Vec<u8> = (0..4 * 4096u32).map(|i| (i * 7 + 3) as u8).collect();
    for (k, p) in pages.iter().enumerate().take(3) {
        z.mem.write(*p, &src[k * 4096..(k + 1) * 4096]).unwrap();
    }
    let first = 1000u32;
    let len = 3 * 4096 - first as u64 + 10; // ends 10 bytes into page 4
    let list = z.list(&pages);
    ok(&mut z, copy_host(ZA_COPY_H2D, 777, len, list, 4, first));
    // Expected: the guest bytes in page order.
    let mut want = Vec::new();
    for (k, p) in pages.iter().enumerate() {
        let from = if k == 0 { first as u64 } else { 0 };
        want.extend(z.ram(p + from, (4096 - from) as usize));
    }
    want.truncate(len as usize);
    assert_eq!(z.hbm(777, len as usize), want);
    assert_eq!(z.stat(ZA_STAT_H2D_BYTES), len);

    // D2H into fresh pages.
    ok(&mut z, fill(0, 20_000, 9, 0));
    let out = [POOL + 20 * 4096, POOL + 30 * 4096, POOL + 21 * 4096];
    let list = z.list(&out);
    let before = z.ram(POOL + 20 * 4096, 4096);
    ok(&mut z, copy_host(ZA_COPY_D2H, 100, 8192, list, 3, 4000));
    let mut got = z.ram(out[0] + 4000, 96);
    got.extend(z.ram(out[1], 4096));
    got.extend(z.ram(out[2], 8192 - 96 - 4096));
    assert_eq!(got, stream(9, 100, 8192));
    assert_eq!(
        z.ram(out[0], 4000),
        before[..4000],
        "before first_off untouched"
    );
    assert_eq!(z.stat(ZA_STAT_D2H_BYTES), 8192);
}

#[test]
fn copy_device_to_device_overlapping() {
    let mut z = Za::new();
    ok(&mut z, fill(0, 10_000, 3, 0));
    let orig = z.hbm(0, 10_000);
    ok(&mut z, d2d(0, 1000, 9000)); // forward overlap
    assert_eq!(z.hbm(1000, 9000), orig[..9000]);
    ok(&mut z, fill(0, 10_000, 3, 0));
    ok(&mut z, d2d(1000, 0, 9000)); // backward overlap
    assert_eq!(z.hbm(0, 9000), orig[1000..]);
    ok(&mut z, d2d(0, HBM - 4096, 4096));
    assert_eq!(z.stat(ZA_STAT_D2D_BYTES), 9000 + 9000 + 4096);
}

#[test]
fn malformed_commands_are_refused_and_write_nothing() {
    let mut z = Za::new();
    ok(&mut z, fill(0, HBM, 11, 0));
    let before = hbm_hash(&z);
    let ram_before = z.ram(0, RAM);
    let bad_desc: Vec<[u8; 64]> = {
        let mut v = vec![
            fill(0, 0, 1, 0),                             // zero length
            fill(0, 16, 1, u64::MAX - 8),                 // stream offset wraps
            hash(0, 0, 0),                                // zero length
            d2d(0, 10, 0),                                // zero length
            copy_host(ZA_COPY_H2D, 0, 4096, LISTS, 2, 0), // page count
            copy_host(ZA_COPY_H2D, 0, 4096, LISTS, 0, 0),
            copy_host(ZA_COPY_H2D, 0, 100, LISTS, 1, 4096), // first_off
            copy_host(ZA_COPY_D2H, 0, 4096, LISTS + 4, 1, 0), // list alignment
            copy_host(9, 0, 4096, LISTS, 1, 0),             // direction
            copy_host(0, 0, 4096, LISTS, 1, 0),
            copy_host(
                ZA_COPY_H2D,
                0,
                (ZA_COPY_MAX_PAGES as u64 + 1) * 4096,
                LISTS,
                ZA_COPY_MAX_PAGES + 1,
                0,
            ),
            copy_host(ZA_COPY_H2D, 0, u64::MAX, LISTS, 0, 1), // first_off + len wraps
        ];
        // Reserved fields, unknown flags, a seed with a pattern, a pattern without.
        let mut c = fill(0, 8, 1, 0);
        c[48] = 1;
        v.push(c);
        let mut c = verify(0, 8, 1, 0);
        c[2] = 2;
        v.push(c);
        let mut c = pattern(ZA_CMD_FILL, 0, 8, 1, 0);
        c[24] = 1;
        v.push(c);
        let mut c = fill(0, 8, 1, 0);
        c[40] = 1;
        v.push(c);
        let mut c = hash(0, 8, 0);
        c[63] = 1;
        v.push(c);
        let mut c = hash(0, 8, 0);
        c[2] = 1;
        v.push(c);
        let mut c = d2d(0, 8, 8);
        c[12] = 1; // npages on D2D
        v.push(c);
        let mut c = d2d(0, 8, 8);
        c[44] = 1; // rsvd0
        v.push(c);
        let mut c = copy_host(ZA_COPY_H2D, 0, 8, LISTS, 1, 0);
        c[48] = 1; // src_off on H2D
        v.push(c);
        let mut c = [0u8; 64];
        c[0] = ZA_CMD_NOP as u8;
        c[9] = 1;
        v.push(c);
        v
    };
    for c in bad_desc {
        assert_eq!(status(&mut z, c), ZA_ST_BAD_DESC, "{c:?}");
    }
    let bounds = [
        fill(HBM, 1, 1, 0),
        fill(HBM - 1, 2, 1, 0),
        fill(u64::MAX, 2, 1, 0),
        fill(1, u64::MAX, 1, 0),
        verify(HBM - 4, 8, 1, 0),
        hash(HBM, 1, 0),
        hash(u64::MAX - 3, 8, 0),
        d2d(HBM - 8, 0, 9),
        d2d(0, HBM - 8, 9),
        d2d(u64::MAX, 0, 2),
    ];
    for c in bounds {
        assert_eq!(status(&mut z, c), ZA_ST_BOUNDS, "{c:?}");
    }
    // COPY to a device range past the end, with a valid list.
    let list = z.list(&[POOL]);
    assert_eq!(
        status(&mut z, copy_host(ZA_COPY_H2D, HBM - 100, 200, list, 1, 0)),
        ZA_ST_BOUNDS
    );
    // Guest RAM errors: list outside, a page outside, a page unaligned.
    let dma = [
        copy_host(ZA_COPY_H2D, 0, 8192, RAM as u64 - 8, 2, 0), // list ends past RAM
        copy_host(ZA_COPY_H2D, 0, 4096, u64::MAX - 7, 1, 0),
    ];
    for c in dma {
        assert_eq!(status(&mut z, c), ZA_ST_DMA, "{c:?}");
    }
    let list = z.list(&[POOL, RAM as u64]);
    assert_eq!(
        status(&mut z, copy_host(ZA_COPY_D2H, 0, 8192, list, 2, 0)),
        ZA_ST_DMA
    );
    let list = z.list(&[POOL, RAM as u64 - 2048]);
    assert_eq!(
        status(&mut z, copy_host(ZA_COPY_D2H, 0, 4096, list, 2, 2048)),
        ZA_ST_BAD_DESC,
        "unaligned page"
    );
    let list = z.list(&[!4095]);
    assert_eq!(
        status(&mut z, copy_host(ZA_COPY_D2H, 0, 4096, list, 1, 0)),
        ZA_ST_DMA
    );
    let mut c = [0u8; 64];
    c[0] = 99;
    assert_eq!(status(&mut z, c), ZA_ST_BAD_OPCODE);
    // Nothing was written anywhere (the page lists aside).
    assert_eq!(hbm_hash(&z), before);
    let mut ram_after = z.ram(0, RAM);
    for r in [
        CMDQ_BASE as usize..CMDQ_BASE as usize + 64 * 64,
        CMDCQ_BASE as usize..CMDCQ_BASE as usize + 64 * 16,
        LISTS as usize..LISTS as usize + 16,
    ] {
        ram_after[r.clone()].copy_from_slice(&ram_before[r]);
    }
    assert!(
        ram_after == ram_before,
        "guest RAM written by a refused command"
    );
    assert!(z.stat(ZA_STAT_BOUNDS_ERR) >= 11);
    assert_eq!(z.stat(ZA_STAT_DMA_ERR), 4);
    assert_eq!(z.stat(ZA_STAT_CMD_OK), 1);
}

#[test]
fn counters_are_per_agent() {
    let mut z = Za::new();
    ok(&mut z, fill(0, 8192, 1, 0));
    ok(&mut z, verify(0, 8192, 1, 0));
    ok(&mut z, hash(0, 4096, ZA_FNV_OFFSET_BASIS));
    let list = z.list(&[POOL, POOL + 4096]);
    ok(&mut z, copy_host(ZA_COPY_H2D, 0, 8192, list, 2, 0));
    ok(&mut z, copy_host(ZA_COPY_D2H, 0, 5000, list, 2, 0));
    ok(&mut z, d2d(0, 10_000, 3000));
    let want = [
        (ZA_STAT_CMD_OK, 6),
        (ZA_STAT_FILL_BYTES, 8192),
        (ZA_STAT_VERIFY_BYTES, 8192),
        (ZA_STAT_HASH_BYTES, 4096),
        (ZA_STAT_H2D_BYTES, 8192),
        (ZA_STAT_D2H_BYTES, 5000),
        (ZA_STAT_D2D_BYTES, 3000),
        (ZA_STAT_PEER_WRITE_BYTES, 0),
        (ZA_STAT_CMD_ERR, 0),
    ];
    for (i, v) in want {
        assert_eq!(z.stat(i), v, "stat {i}");
        assert_eq!(z.dev.counters.get(i), v, "counter {i}");
    }
    assert!(z.irq.count(ZA_VEC_CMD) >= 6);
    assert_eq!(z.stat(ZA_STAT_IRQS), z.irq.count(ZA_VEC_CMD));
    // Unused slots read 0.
    for i in ZA_STAT_COUNT..ZA_STAT_SLOTS {
        assert_eq!(z.stat(i), 0);
    }
}

#[test]
fn interrupt_mask_holds_then_releases() {
    let mut z = Za::new();
    let n = z.irq.count(ZA_VEC_CMD);
    z.w32(ZA_REG_IRQ_MASK, 1);
    ok(&mut z, fill(0, 8, 1, 0));
    assert_eq!(z.irq.count(ZA_VEC_CMD), n, "held");
    z.w32(ZA_REG_IRQ_MASK, 0);
    z.step();
    assert_eq!(z.irq.count(ZA_VEC_CMD), n + 1, "raised at unmask");
    z.step();
    assert_eq!(z.irq.count(ZA_VEC_CMD), n + 1, "once");
}

#[test]
fn impossible_producer_index_is_fatal_until_reset() {
    let mut z = Za::new();
    z.w32(ZA_REG_CMDQ + Q_PROD, NCMD + 1);
    z.step();
    assert_ne!(z.r32(ZA_REG_DEV_STATUS) & ZA_STATUS_FATAL, 0);
    assert_eq!(z.r32(ZA_REG_FATAL_CODE), ZA_ST_BAD_DESC as u32);
    assert_eq!(z.r32(ZA_REG_FATAL_INFO), ZA_QID_CMDQ);
    assert_eq!(z.r32(ZA_REG_CMDQ + Q_STATUS), Q_STATUS_ERROR);
    z.bring_up();
    assert_eq!(z.r32(ZA_REG_DEV_STATUS) & ZA_STATUS_FATAL, 0);
    ok(&mut z, fill(0, 8, 1, 0));
}

#[test]
fn queue_outside_guest_ram_is_refused() {
    let mut z = Za::new();
    z.reset();
    let b = &z.dev.bar;
    use zeronic_hw::regs::{Q_BASE, Q_CTRL, Q_CTRL_ENABLE, Q_ERROR, Q_SIZE};
    b.w64(ZA_REG_CMDQ + Q_BASE, RAM as u64 - 64);
    b.w32(ZA_REG_CMDQ + Q_SIZE, 64);
    b.w32(ZA_REG_CMDQ + Q_CTRL, Q_CTRL_ENABLE);
    z.step();
    assert_eq!(z.r32(ZA_REG_CMDQ + Q_STATUS), Q_STATUS_ERROR);
    assert_eq!(z.r32(ZA_REG_CMDQ + Q_ERROR), ZA_ST_QUEUE_CONFIG as u32);
    assert_eq!(z.r32(ZA_REG_DEV_STATUS) & ZA_STATUS_FATAL, 0, "not fatal");
}

/// Two accelerators of one guest in one map, and a GuestDma over them.
fn pair() -> (Za, Za, GuestDma) {
    let mut a = Za::new();
    let mut b = Za::new();
    let peers = Arc::new(PeerMap::new(vec![
        a.dev.aperture.clone(),
        b.dev.aperture.clone(),
    ]));
    a.dev.set_peers(peers.clone());
    b.dev.set_peers(peers.clone());
    a.bring_up();
    b.bring_up();
    let dma = GuestDma {
        ram: a.mem.clone(),
        peers,
    };
    (a, b, dma)
}

fn enable(z: &mut Za, base: u64) -> u32 {
    z.dev.bar.w32(ZA_REG_APERTURE_CTRL, 0);
    z.step();
    z.dev.bar.w64(ZA_REG_APERTURE_BASE, base);
    z.dev.bar.w32(ZA_REG_APERTURE_CTRL, ZA_APERTURE_ENABLE);
    z.step();
    z.r32(ZA_REG_APERTURE_STATUS)
}

#[test]
fn aperture_checks() {
    let (mut a, mut b, _) = pair();
    let base = 0x1_0000_0000u64;
    assert_eq!(enable(&mut a, base), ZA_APERTURE_ACTIVE);
    assert_eq!(a.dev.aperture.base(), Some(base));
    let refused = |z: &mut Za, base: u64, code: u16| {
        assert_eq!(enable(z, base), ZA_APERTURE_REFUSED, "{base:#x}");
        assert_eq!(z.r32(ZA_REG_APERTURE_ERROR), code as u32, "{base:#x}");
        assert_eq!(z.dev.aperture.base(), None);
    };
    refused(&mut b, base + 4096, ZA_ST_BAD_DESC); // misaligned
    refused(&mut b, 0, ZA_ST_CONFLICT); // guest RAM
    refused(&mut b, ZA_APERTURE_ALIGN, ZA_ST_CONFLICT); // still guest RAM (4 MiB)
    refused(&mut b, base, ZA_ST_CONFLICT); // a's aperture
    refused(&mut b, base - ZA_APERTURE_ALIGN, ZA_ST_CONFLICT); // overlaps a's start
    refused(
        &mut b,
        ZA_APERTURE_LIMIT - ZA_APERTURE_ALIGN,
        ZA_ST_BAD_DESC,
    ); // past the limit
    refused(&mut b, !(ZA_APERTURE_ALIGN - 1), ZA_ST_BAD_DESC); // wraps
    assert_eq!(b.stat(ZA_STAT_APERTURE_REFUSED), 7);
    // Right after a's end is fine; so is the last place below the limit.
    assert_eq!(enable(&mut b, base + 0x80_0000), ZA_APERTURE_ACTIVE);
    assert_eq!(
        enable(&mut b, ZA_APERTURE_LIMIT - 0x80_0000),
        ZA_APERTURE_ACTIVE
    );
    // Disabling withdraws; a reset does too.
    a.dev.bar.w32(ZA_REG_APERTURE_CTRL, 0);
    a.step();
    assert_eq!(a.r32(ZA_REG_APERTURE_STATUS), 0);
    assert_eq!(a.dev.aperture.base(), None);
    assert_eq!(enable(&mut a, base), ZA_APERTURE_ACTIVE);
    a.reset();
    assert_eq!(a.dev.aperture.base(), None);
    assert_eq!(a.r32(ZA_REG_APERTURE_STATUS), 0);
    assert_eq!(a.r32(ZA_REG_APERTURE_CTRL), 0);
}

#[test]
fn aperture_waits_for_guest_ram() {
    let mut dev = Accel::new("noram", BAR).unwrap();
    dev.bar.w64(ZA_REG_APERTURE_BASE, 0x1_0000_0000);
    dev.bar.w32(ZA_REG_APERTURE_CTRL, ZA_APERTURE_ENABLE);
    dev.scan(std::time::Instant::now());
    assert_eq!(dev.bar.r32(ZA_REG_APERTURE_STATUS), 0, "pending");
    assert_eq!(dev.aperture.base(), None);
}

#[test]
fn peer_dma_resolves_into_exactly_one_region() {
    let (mut a, mut b, dma) = pair();
    let (ba, bb) = (0x1_0000_0000u64, 0x2_0000_0000u64);
    assert_eq!(enable(&mut a, ba), ZA_APERTURE_ACTIVE);
    assert_eq!(enable(&mut b, bb), ZA_APERTURE_ACTIVE);
    let data: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
    // Guest RAM.
    assert_eq!(dma.write(POOL, &data), Ok(Target::Ram));
    assert_eq!(a.ram(POOL, 5000), data);
    // Each aperture, both ends included.
    assert_eq!(dma.write(ba + 100, &data), Ok(Target::Peer(0)));
    assert_eq!(a.hbm(100, 5000), data);
    assert_eq!(dma.write(bb + HBM - 5000, &data), Ok(Target::Peer(1)));
    assert_eq!(b.hbm(HBM - 5000, 5000), data);
    let mut back = vec![0u8; 5000];
    assert_eq!(dma.read(ba + 100, &mut back), Ok(Target::Peer(0)));
    assert_eq!(back, data);
    let hash_a = hbm_hash(&a);
    let hash_b = hbm_hash(&b);
    // Refused: past an aperture's end, straddling its start, straddling
    // RAM's end, in no region, wrapping.
    let refused = [
        (bb + HBM - 10, 11u64),
        (ba - 1, 2),
        (RAM as u64 - 1, 2),
        (RAM as u64, 1),
        (0x3_0000_0000, 1),
        (u64::MAX, 2),
    ];
    for (addr, len) in refused {
        let d = vec![0xeeu8; len as usize];
        assert!(dma.write(addr, &d).is_err(), "{addr:#x}+{len}");
    }
    assert_eq!(hbm_hash(&a), hash_a);
    assert_eq!(hbm_hash(&b), hash_b);
    a.step();
    b.step();
    assert_eq!(a.stat(ZA_STAT_PEER_WRITE_BYTES), 5000);
    assert_eq!(a.stat(ZA_STAT_PEER_READ_BYTES), 5000);
    assert_eq!(a.stat(ZA_STAT_PEER_ERR), 1, "straddles a's start");
    assert_eq!(b.stat(ZA_STAT_PEER_WRITE_BYTES), 5000);
    assert_eq!(b.stat(ZA_STAT_PEER_ERR), 1, "past b's end");
    // A withdrawn aperture is no longer reachable.
    a.dev.bar.w32(ZA_REG_APERTURE_CTRL, 0);
    a.step();
    assert!(dma.write(ba + 100, &[1, 2, 3]).is_err());
    assert_eq!(hbm_hash(&a), hash_a);
    // Guest RAM of 4 MiB and a NIC's page-sized access at its very end.
    assert_eq!(dma.write(RAM as u64 - 4096, &[7; 4096]), Ok(Target::Ram));
}

#[test]
fn withdrawal_waits_for_an_access_in_flight() {
    let (mut a, _b, dma) = pair();
    let base = 0x1_0000_0000u64;
    assert_eq!(enable(&mut a, base), ZA_APERTURE_ACTIVE);
    let span = dma
        .resolve(base, 64, zeronic_nic::accel::dma_space::Dir::Write)
        .unwrap();
    let ap = a.dev.aperture.clone();
    let peers = Arc::new(PeerMap::new(vec![ap.clone()]));
    let t = std::thread::spawn(move || {
        peers.disable(&ap);
        std::time::Instant::now()
    });
    std::thread::sleep(std::time::Duration::from_millis(50));
    let released = std::time::Instant::now();
    drop(span);
    let withdrawn = t.join().unwrap();
    assert!(
        withdrawn >= released,
        "disable returned while a span was held"
    );
}

#[test]
fn ram_address_zero_is_not_device_offset_zero() {
    // The resolver never confuses a RAM address with device offset 0.
    let (mut a, _b, dma) = pair();
    assert_eq!(enable(&mut a, 0x1_0000_0000), ZA_APERTURE_ACTIVE);
    assert_eq!(dma.write(0, &[9; 16]), Ok(Target::Ram));
    assert_eq!(a.hbm(0, 16), vec![0; 16]);
}
