//! The fuzzer's raw-ioctl layer: the one call that hands the driver any
//! command word and argument pointer ([`raw_ioctl`]), the kernel's `_IOC`
//! encoding, the valid words (`zeronic-uapi`'s, which the provider library
//! `lib/zeronic` uses too), and generators of every other word of the
//! driver's type. Well-formed calls the fuzzer needs besides (opening the
//! device, QUERY, reading a mapped CQ) come from the provider library.

use std::os::fd::RawFd;

use nix::errno::Errno;
use zeronic_uapi::{
    IOCTL_TYPE, IOC_CQ_CREATE, IOC_CQ_DESTROY, IOC_FLOW_ATTACH, IOC_FLOW_DETACH, IOC_FLOW_QUERY,
    IOC_MR_DEREG, IOC_MR_REG, IOC_POST, IOC_QUERY, IOC_STREAM_CONSUME,
};

use crate::rng::Rng;

/// The raw ioctl; `Ok` with the return value.
///
/// `arg` must point into this process's fuzzing mappings (argument pages or
/// other mappings of `mem`, never memory Rust code references), at a uapi
/// struct of the caller's that only this call uses, or at an address no
/// user mapping of ours covers: whatever the kernel does with it then
/// cannot alias a Rust object. Every caller passes such an address.
pub fn raw_ioctl(fd: RawFd, cmd: u32, arg: u64) -> Result<i32, Errno> {
    // SAFETY: `arg` is one of the addresses the contract above lists (the
    // callers' comments say which), so what the kernel reads or writes
    // there aliases no Rust reference.
    let r = unsafe { libc::ioctl(fd, cmd as libc::c_ulong, arg as *mut libc::c_void) };
    if r < 0 {
        Err(Errno::last())
    } else {
        Ok(r)
    }
}

/// `_IOC_NONE`, `_IOC_WRITE`, `_IOC_READ`, both (asm-generic/ioctl.h).
pub const DIRS: [u32; 4] = [0, 1, 2, 3];
/// `_IOC_WRITE | _IOC_READ`.
pub const DIR_RW: u32 = 3;
/// `_IOC_WRITE`: userspace writes, the kernel reads.
pub const DIR_W: u32 = 1;

/// `_IOC(dir, type, nr, size)`.
pub const fn ioc(dir: u32, ty: u8, nr: u8, size: u32) -> u32 {
    (dir << 30) | ((size & 0x3fff) << 16) | ((ty as u32) << 8) | nr as u32
}

/// The argument size a command word encodes.
pub const fn size_of_cmd(cmd: u32) -> u32 {
    (cmd >> 16) & 0x3fff
}

/// The command words the driver implements.
pub const VALID: [u32; 10] = [
    IOC_QUERY,
    IOC_MR_REG,
    IOC_MR_DEREG,
    IOC_CQ_CREATE,
    IOC_CQ_DESTROY,
    IOC_FLOW_ATTACH,
    IOC_FLOW_DETACH,
    IOC_POST,
    IOC_STREAM_CONSUME,
    IOC_FLOW_QUERY,
];

/// Version 1's MR_REG and MR_DEREG (32-bit keys), retired: ENOTTY.
pub const RETIRED: [u32; 2] = [
    ioc(DIR_RW, IOCTL_TYPE, 0x01, 32),
    ioc(DIR_W, IOCTL_TYPE, 0x02, 8),
];

/// A command word of type 0xDA that is none of [`VALID`]: a retired one,
/// a valid number with another direction or size, another number, or
/// random bits.
pub fn unknown(rng: &mut Rng) -> u32 {
    loop {
        let t = IOCTL_TYPE;
        let cmd = match rng.below(6) {
            0 => *rng.pick(&RETIRED),
            1 => {
                let v = *rng.pick(&VALID);
                ioc(*rng.pick(&DIRS), t, v as u8, size_of_cmd(v))
            }
            2 => {
                let v = *rng.pick(&VALID);
                let size = match rng.below(3) {
                    0 => size_of_cmd(v).wrapping_add(rng.range(1, 8) as u32),
                    1 => size_of_cmd(v).saturating_sub(rng.range(1, 8) as u32),
                    _ => rng.below(0x4000) as u32,
                };
                ioc(v >> 30, t, v as u8, size)
            }
            3 => ioc(
                *rng.pick(&DIRS),
                t,
                rng.range(1, 255) as u8,
                rng.below(512) as u32,
            ),
            4 => (rng.next_u32() & !0xff00) | (u32::from(t) << 8),
            _ => ioc(
                *rng.pick(&DIRS),
                t,
                rng.below(5) as u8,
                rng.below(256) as u32,
            ),
        };
        if !VALID.contains(&cmd) {
            return cmd;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_matches_the_header() {
        assert_eq!(ioc(DIR_RW, IOCTL_TYPE, 0, 120), IOC_QUERY);
        assert_eq!(ioc(DIR_RW, IOCTL_TYPE, 3, 32), IOC_MR_REG);
        assert_eq!(ioc(DIR_W, IOCTL_TYPE, 4, 16), IOC_MR_DEREG);
        assert_eq!(RETIRED, [0xC020_DA01, 0x4008_DA02]);
    }

    #[test]
    fn unknown_is_never_valid() {
        let mut r = Rng::new(1);
        for _ in 0..100_000 {
            let c = unknown(&mut r);
            assert!(!VALID.contains(&c));
            assert_eq!((c >> 8) & 0xff, u32::from(IOCTL_TYPE));
        }
    }
}
