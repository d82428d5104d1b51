//! MR keys (docs/hardware.md §10, CMD_MR_REG): 64-bit, the slot in bits
//! 0..16 and a 48-bit generation that never repeats between two resets and
//! does not follow from earlier keys; revoked keys stay dead.

mod common;

use std::collections::HashSet;

use common::*;
use zeronic_hw::cmd::*;
use zeronic_hw::status::*;
use zeronic_nic::keygen::{KeyGen, GEN_SPACE};
use zeronic_nic::mem::GuestMem;
use zeronic_nic::model::Topology;
use zeronic_nic::mr::{MrTable, RegRequest};
use zeronic_nic::wire::Impair;

/// Registers and invalidates one page `n` times in a row (so every
/// registration takes slot 0), 32 command pairs per scan; returns the keys.
fn churn_slot(tb: &mut Tb, n: usize) -> Vec<u64> {
    let a = tb.drv[0].alloc(4096);
    let list = tb.drv[0].alloc(8);
    tb.drv[0].mem.write(list, &a.to_le_bytes()).unwrap();
    let reg = CmdMrReg {
        opcode: CMD_MR_REG,
        access: MR_ACCESS_LOCAL_READ,
        npages: 1,
        length: 4096,
        page_list: list,
        ..Default::default()
    };
    let mut keys: Vec<u64> = Vec::with_capacity(n);
    while keys.len() < n {
        // The previous key is revoked in the same scan as the next
        // registration, which so takes the same slot again.
        let mut batch = Vec::new();
        if let Some(&prev) = keys.last() {
            let inv = CmdMrInval {
                opcode: CMD_MR_INVAL,
                key: prev,
                ..Default::default()
            };
            batch.push(inv.encode());
        }
        batch.push(reg.encode());
        let done = tb.cmds(0, &batch);
        assert!(done.iter().all(|c| c.status == ST_OK), "{done:?}");
        keys.push(done.last().unwrap().result);
    }
    keys
}

#[test]
fn a_slot_never_repeats_a_key_and_keys_do_not_count_up() {
    let mut tb = Tb::new(Topology::TwoGuest, Impair::default());
    // More than the 65535 registrations after which a 16-bit generation
    // that counts up comes back to the same key.
    let keys = churn_slot(&mut tb, 70_000);
    let mut seen = HashSet::new();
    for &k in &keys {
        assert_eq!(k & 0xffff, 0, "lowest free slot");
        assert_ne!(k >> MR_KEY_SLOT_BITS, 0, "generation 0 is never used");
        assert!(seen.insert(k), "key {k:#x} handed out twice");
    }
    // A counter (or any fixed step) would make the next key predictable.
    let steps: HashSet<u64> = keys
        .windows(2)
        .map(|w| (w[1] >> 16).wrapping_sub(w[0] >> 16))
        .collect();
    assert!(steps.len() > 60_000, "generations follow a pattern");
    // Generations use all 48 bits.
    assert!(keys.iter().any(|k| k >> 48 != 0));
}

#[test]
fn revoked_keys_stay_dead_and_keys_change_across_resets() {
    let mut tb = Tb::new(Topology::TwoGuest, Impair::default());
    let a = tb.drv[0].alloc(4096);
    let k1 = tb.reg_mr(0, a, 4096, MR_ACCESS_LOCAL_READ).unwrap();
    assert_eq!(tb.inval_mr(0, k1), ST_OK);
    let k2 = tb.reg_mr(0, a, 4096, MR_ACCESS_LOCAL_READ).unwrap();
    assert_eq!(k1 & 0xffff, k2 & 0xffff, "same slot");
    assert_ne!(k1, k2);
    assert_eq!(tb.inval_mr(0, k1), ST_BAD_KEY, "stale generation");
    // Every bit of the generation is checked.
    for bit in 16..64 {
        assert_eq!(tb.inval_mr(0, k2 ^ (1 << bit)), ST_BAD_KEY, "bit {bit}");
    }
    tb.bring_up(0); // reset: new secret, counter from 0
    let k3 = tb.reg_mr(0, a, 4096, MR_ACCESS_LOCAL_READ).unwrap();
    assert_eq!(tb.inval_mr(0, k2), ST_BAD_KEY, "reset revokes");
    assert_ne!(
        k3, k1,
        "the first key after a reset is not the last secret's"
    );
}

#[test]
fn registration_counter_exhaustion_is_no_space() {
    let mem = GuestMem::anon(1 << 20).unwrap();
    mem.write(0x1000, &0x2000u64.to_le_bytes()).unwrap();
    let req = RegRequest {
        access: MR_ACCESS_ALL,
        npages: 1,
        first_off: 0,
        length: 4096,
        page_list: 0x1000,
    };
    let g = KeyGen::with_secret(11, 12, 0);
    // Start just before the counter value whose generation is 0, so the
    // skip is exercised too, and near the end of the counter space.
    let zero = g.invert(0);
    let mut t = MrTable::with_keygen(KeyGen::with_secret(11, 12, zero));
    let k = t.register(&mem, &req).unwrap();
    assert_eq!(k >> MR_KEY_SLOT_BITS, g.permute(zero + 1));
    let mut t = MrTable::with_keygen(KeyGen::with_secret(11, 12, GEN_SPACE - 1));
    let last = g.permute(GEN_SPACE - 1);
    if last != 0 {
        assert_eq!(t.register(&mem, &req).map(|k| k >> 16), Ok(last));
    }
    assert_eq!(t.register(&mem, &req), Err(ST_NO_SPACE));
    assert_eq!(t.used() as u32, (last != 0) as u32);
}
