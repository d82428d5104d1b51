//! The errnos each call may return: the one table the fuzzer's first oracle
//! checks every result against. It transcribes the comment block
//! "Errors (errno), ..." of `uapi/linux/zeronic.h`; a test below parses that
//! block and fails if the two disagree, so a change of the header's list
//! must change this table too.
//!
//! Allocation-free (static slices), so forked children use it.

use nix::errno::Errno;
use nix::errno::Errno::{
    E2BIG, EACCES, EAFNOSUPPORT, EAGAIN, EBADF, EBUSY, EEXIST, EFAULT, EINVAL, EIO, ENODEV, ENOENT,
    ENOMEM, ENOSPC, ENOTCONN, ENOTSOCK, ENOTTY, EOPNOTSUPP, EPIPE, EPROTONOSUPPORT, ERANGE,
};

/// The calls the fuzzer makes. `Unknown` is any other command word of the
/// driver's ioctl type (0xDA): a wrong number, size or direction, or one of
/// the retired numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// `ZERONIC_IOC_QUERY`.
    Query = 0,
    /// `ZERONIC_IOC_MR_REG`.
    MrReg,
    /// `ZERONIC_IOC_MR_DEREG`.
    MrDereg,
    /// `ZERONIC_IOC_CQ_CREATE`.
    CqCreate,
    /// `ZERONIC_IOC_CQ_DESTROY`.
    CqDestroy,
    /// `ZERONIC_IOC_FLOW_ATTACH`.
    FlowAttach,
    /// `ZERONIC_IOC_FLOW_DETACH`.
    FlowDetach,
    /// `ZERONIC_IOC_POST`.
    Post,
    /// `ZERONIC_IOC_STREAM_CONSUME`.
    StreamConsume,
    /// `ZERONIC_IOC_FLOW_QUERY`.
    FlowQuery,
    /// Any other command word with type 0xDA.
    Unknown,
}

/// Number of [`Call`] kinds.
pub const CALLS: usize = 11;

impl Call {
    /// The header's name of the call.
    pub fn name(self) -> &'static str {
        match self {
            Call::Query => "ZERONIC_IOC_QUERY",
            Call::MrReg => "ZERONIC_IOC_MR_REG",
            Call::MrDereg => "ZERONIC_IOC_MR_DEREG",
            Call::CqCreate => "ZERONIC_IOC_CQ_CREATE",
            Call::CqDestroy => "ZERONIC_IOC_CQ_DESTROY",
            Call::FlowAttach => "ZERONIC_IOC_FLOW_ATTACH",
            Call::FlowDetach => "ZERONIC_IOC_FLOW_DETACH",
            Call::Post => "ZERONIC_IOC_POST",
            Call::StreamConsume => "ZERONIC_IOC_STREAM_CONSUME",
            Call::FlowQuery => "ZERONIC_IOC_FLOW_QUERY",
            Call::Unknown => "unknown command word",
        }
    }

    /// All kinds, in index order.
    pub const ALL: [Call; CALLS] = [
        Call::Query,
        Call::MrReg,
        Call::MrDereg,
        Call::CqCreate,
        Call::CqDestroy,
        Call::FlowAttach,
        Call::FlowDetach,
        Call::Post,
        Call::StreamConsume,
        Call::FlowQuery,
        Call::Unknown,
    ];
}

/// "Errors (errno), common to all calls" of the header.
const COMMON: &[Errno] = &[ENOTTY, EFAULT, EINVAL, ENODEV];
/// "ZERONIC_IOC_MR_REG:" of the header.
const MR_REG: &[Errno] = &[EINVAL, E2BIG, EFAULT, ENOMEM, ENOSPC, EIO];
/// "ZERONIC_IOC_MR_DEREG:" of the header.
const MR_DEREG: &[Errno] = &[ENOENT, EIO, EBUSY];
/// "ZERONIC_IOC_CQ_CREATE:".
const CQ_CREATE: &[Errno] = &[EINVAL, EBADF, ENOMEM, ENOSPC];
/// "ZERONIC_IOC_CQ_DESTROY:".
const CQ_DESTROY: &[Errno] = &[ENOENT, EBUSY];
/// "ZERONIC_IOC_FLOW_ATTACH:".
const FLOW_ATTACH: &[Errno] = &[
    EINVAL,
    ENOENT,
    EBADF,
    ENOTSOCK,
    EPROTONOSUPPORT,
    EBUSY,
    EEXIST,
    ENOTCONN,
    EAFNOSUPPORT,
    EOPNOTSUPP,
    ENODEV,
    EACCES,
    EAGAIN,
    ENOSPC,
    EIO,
    ENOMEM,
];
/// "ZERONIC_IOC_FLOW_DETACH, FLOW_QUERY, STREAM_CONSUME:".
const FLOW_ID: &[Errno] = &[ENOENT];
/// "ZERONIC_IOC_POST" ("the errno is the first refused request's").
const POST: &[Errno] = &[
    ENOENT, EINVAL, EFAULT, EACCES, ERANGE, EAGAIN, EPIPE, EIO, ENOMEM,
];
/// "ZERONIC_IOC_STREAM_CONSUME:", besides [`FLOW_ID`].
const STREAM_CONSUME: &[Errno] = &[ENOENT, EINVAL];
/// An unknown command word: "ENOTTY unknown ioctl number".
const UNKNOWN: &[Errno] = &[ENOTTY];

/// The errnos the header documents for `call`, beyond the common ones.
fn own(call: Call) -> &'static [Errno] {
    match call {
        Call::Query | Call::Unknown => &[],
        Call::MrReg => MR_REG,
        Call::MrDereg => MR_DEREG,
        Call::CqCreate => CQ_CREATE,
        Call::CqDestroy => CQ_DESTROY,
        Call::FlowAttach => FLOW_ATTACH,
        Call::FlowDetach | Call::FlowQuery => FLOW_ID,
        Call::Post => POST,
        Call::StreamConsume => STREAM_CONSUME,
    }
}

/// Whether `call` may fail with `e`. Each call may return the common
/// errnos and its own, except ENOTTY, which says the command word is not
/// one of them; an unknown command word fails with ENOTTY only.
pub fn allowed(call: Call, e: Errno) -> bool {
    match call {
        Call::Unknown => UNKNOWN.contains(&e),
        _ => e != ENOTTY && (COMMON.contains(&e) || own(call).contains(&e)),
    }
}

/// The allowed errnos of `call`, for messages.
pub fn allowed_list(call: Call) -> String {
    let mut v: Vec<&str> = Vec::new();
    for e in COMMON.iter().chain(own(call)).chain(UNKNOWN) {
        if allowed(call, *e) && !v.contains(&e.name()) {
            v.push(e.name());
        }
    }
    v.join(" ")
}

/// Errno's symbolic name (`EFAULT`), without allocating.
pub trait ErrnoName {
    /// The name, or "E?" for a value nix does not know.
    fn name(&self) -> &'static str;
}

impl ErrnoName for Errno {
    fn name(&self) -> &'static str {
        macro_rules! names {
            ($($e:ident)*) => {
                match self {
                    $(Errno::$e => stringify!($e),)*
                    _ => "E?",
                }
            };
        }
        names!(EPERM ENOENT ESRCH EINTR EIO ENXIO E2BIG ENOEXEC EBADF ECHILD EAGAIN ENOMEM
            EACCES EFAULT ENOTBLK EBUSY EEXIST EXDEV ENODEV ENOTDIR EISDIR EINVAL ENFILE EMFILE
            ENOTTY ETXTBSY EFBIG ENOSPC ESPIPE EROFS EMLINK EPIPE EDOM ERANGE EDEADLK ENAMETOOLONG
            ENOLCK ENOSYS ENOTEMPTY ELOOP ENOMSG EIDRM ENOSTR ENODATA ETIME ENOSR EOVERFLOW
            EBADFD EILSEQ EUSERS ENOTSOCK EMSGSIZE EPROTOTYPE ENOPROTOOPT EPROTONOSUPPORT
            ESOCKTNOSUPPORT EAFNOSUPPORT EADDRNOTAVAIL EOPNOTSUPP EADDRINUSE
            ENETDOWN ENETUNREACH ECONNRESET ENOBUFS EISCONN ENOTCONN ETIMEDOUT ECONNREFUSED
            EHOSTUNREACH EALREADY EINPROGRESS ESTALE EDQUOT ECANCELED EOWNERDEAD ENOTRECOVERABLE
            ERFKILL EHWPOISON)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The header's errno block: section name ("common", "ZERONIC_IOC_MR_REG",
    /// ...) -> errno names listed in it. A section line starts with
    /// `ZERONIC_IOC_` and may name several calls ("ZERONIC_IOC_FLOW_DETACH,
    /// FLOW_QUERY, STREAM_CONSUME:") and continue with a remark in
    /// parentheses; a call may have more than one section.
    fn header_lists() -> Vec<(String, Vec<String>)> {
        let header = include_str!("../../../uapi/linux/zeronic.h");
        let start = header
            .find("Errors (errno), common to all calls:")
            .expect("the header has no 'Errors (errno), common to all calls:' block");
        let block = &header[start..];
        let block = &block[..block.find("*/").expect("unterminated comment")];
        let mut out: Vec<(String, Vec<String>)> = vec![("common".into(), Vec::new())];
        let mut current: Vec<String> = vec!["common".into()];
        for line in block.lines().skip(1) {
            let text = line.trim_start().trim_start_matches('*').trim();
            if text.starts_with("Lifetime:") || text.starts_with("Accounting:") {
                break;
            }
            if text.starts_with("ZERONIC_IOC_") {
                let names = text.split(['(', ':']).next().unwrap_or("");
                current = names
                    .split(',')
                    .map(|n| n.trim())
                    .filter(|n| !n.is_empty())
                    .map(|n| {
                        if n.starts_with("ZERONIC_IOC_") {
                            n.to_string()
                        } else {
                            format!("ZERONIC_IOC_{n}")
                        }
                    })
                    .collect();
                for n in &current {
                    if !out.iter().any(|(x, _)| x == n) {
                        out.push((n.clone(), Vec::new()));
                    }
                }
                continue;
            }
            // An errno line: the name in the first column of the comment.
            let indent = line.len() - line.trim_start_matches([' ', '\t', '*']).len();
            let word = text.split_whitespace().next().unwrap_or("");
            if indent <= 5
                && word.len() > 1
                && word.starts_with('E')
                && word
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
            {
                for n in &current {
                    let list = &mut out.iter_mut().find(|(x, _)| x == n).expect("a section").1;
                    if !list.iter().any(|w| w == word) {
                        list.push(word.to_string());
                    }
                }
            }
        }
        out
    }

    fn names(v: &[Errno]) -> Vec<String> {
        let mut n: Vec<String> = v.iter().map(|e| e.name().to_string()).collect();
        n.sort();
        n.dedup();
        n
    }

    fn sorted(mut v: Vec<String>) -> Vec<String> {
        v.sort();
        v
    }

    #[test]
    fn table_matches_the_header() {
        let lists = header_lists();
        let get = |name: &str| {
            lists
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, l)| sorted(l.clone()))
                .unwrap_or_default()
        };
        assert_eq!(get("common"), names(COMMON), "common errnos");
        for call in Call::ALL {
            if call == Call::Unknown {
                continue;
            }
            assert_eq!(
                get(call.name()),
                names(own(call)),
                "{} errnos (header sections: {lists:?})",
                call.name()
            );
        }
        // Every call the header lists errnos for is one the fuzzer knows.
        for (name, _) in &lists {
            assert!(
                name == "common" || Call::ALL.iter().any(|c| c.name() == name),
                "the header lists errnos of {name}, which the fuzzer's table lacks"
            );
        }
    }

    #[test]
    fn allowed_sets() {
        assert!(allowed(Call::Query, EFAULT));
        assert!(allowed(Call::Query, ENODEV));
        assert!(!allowed(Call::Query, ENOENT));
        assert!(!allowed(Call::Query, ENOTTY));
        assert!(allowed(Call::MrReg, ENOSPC));
        assert!(!allowed(Call::MrReg, EAGAIN_));
        assert!(allowed(Call::MrDereg, ENOENT));
        assert!(!allowed(Call::MrDereg, ENOMEM));
        assert!(allowed(Call::Unknown, ENOTTY));
        assert!(!allowed(Call::Unknown, EINVAL));
        assert_eq!(allowed_list(Call::Unknown), "ENOTTY");
    }

    const EAGAIN_: Errno = Errno::EAGAIN;
}
