//! Attaching a socket by `setsockopt(SOL_TCP, TCP_ULP, "zeronic")`
//! (docs/uapi.md, "Attaching a socket by setsockopt"): the ULP's name, and
//! what each errno of a refused attach means, for the messages of the
//! programs that attach (the shim, `zn-perf --mode served`).

use nix::errno::Errno;
use std::ffi::CStr;

/// The ULP's name, the option value of `TCP_ULP`.
pub const ULP_NAME: &CStr = c"zeronic";

/// What a refused attach's errno means (docs/uapi.md's table of errors);
/// `""` for an errno the table does not list. No allocation: the shim
/// calls it from wrappers that may run in a signal handler.
pub fn refusal(e: Errno) -> &'static str {
    match e {
        Errno::ENOTCONN => "the socket is not established",
        Errno::EAFNOSUPPORT => "an IPv6 connection on a NIC without IPv6",
        Errno::EEXIST => "a ULP is attached already",
        Errno::ENODEV => "the route does not leave through a port of a bound ZeroNIC",
        Errno::EOPNOTSUPP => {
            "the port's tcp-data-split is off, or TCP-MD5/AO, repair mode, IPsec or sockmap"
        }
        Errno::ENOMEM => "the receive ring is beyond RLIMIT_MEMLOCK, or out of memory",
        Errno::ENOSPC => "the MR Table share, the MR Table or the Flow Table is full",
        Errno::EIO => "the NIC did not complete the commands",
        Errno::ENOENT => "no such ULP: the zeronic module is not loaded",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_errno_has_a_meaning() {
        for e in [
            Errno::ENOTCONN,
            Errno::EAFNOSUPPORT,
            Errno::EEXIST,
            Errno::ENODEV,
            Errno::EOPNOTSUPP,
            Errno::ENOMEM,
            Errno::ENOSPC,
            Errno::EIO,
            Errno::ENOENT,
        ] {
            assert!(!refusal(e).is_empty(), "{e:?}");
        }
        assert_eq!(refusal(Errno::EINVAL), "");
        assert_eq!(ULP_NAME.to_bytes(), b"zeronic");
    }
}
