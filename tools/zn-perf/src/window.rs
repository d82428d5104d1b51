//! The receive window of a TCP socket, bounded for offloaded receivers
//! (on unless `--no-window-clamp`): socket options, nothing of `/dev/zeronic`.

use anyhow::{Context, Result};
use nix::errno::Errno;
use std::os::fd::{AsRawFd, BorrowedFd};

fn setsockopt_int(
    sock: BorrowedFd<'_>,
    level: i32,
    name: i32,
    v: nix::libc::c_int,
) -> nix::Result<()> {
    // SAFETY: `v` is a readable c_int of the size passed, for the call only.
    let r = unsafe {
        nix::libc::setsockopt(
            sock.as_raw_fd(),
            level,
            name,
            (&raw const v).cast(),
            size_of::<nix::libc::c_int>() as nix::libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(Errno::last());
    }
    Ok(())
}

/// Bounds the receive window `sock` advertises to `bytes`:
/// `TCP_WINDOW_CLAMP` of `bytes`, and a receive buffer of twice that
/// (`SO_RCVBUF` of `bytes`, which the kernel doubles; `SO_RCVBUFFORCE`
/// where allowed, to pass `net.core.rmem_max`), which also stops
/// receive-buffer autotuning from raising it.
///
/// Why the headroom: TCP charges every queued receipt to the socket (the
/// payload's length plus the skb head holding its headers). A buffer of
/// exactly one window overflows once a full window waits unread, and TCP
/// then prunes the queue: `tcp_collapse()` copies every queued byte into
/// new buffers, which the flow can only copy again into place (counted as
/// copied). TCP's own autotuning keeps that headroom; a fixed clamp must
/// leave it too.
pub fn clamp_window(sock: BorrowedFd<'_>, bytes: u32) -> Result<()> {
    use nix::libc::{IPPROTO_TCP, SOL_SOCKET, SO_RCVBUF, SO_RCVBUFFORCE, TCP_WINDOW_CLAMP};
    let v = nix::libc::c_int::try_from(bytes).unwrap_or(nix::libc::c_int::MAX);
    match setsockopt_int(sock, SOL_SOCKET, SO_RCVBUFFORCE, v) {
        Ok(()) => {}
        Err(Errno::EPERM) => setsockopt_int(sock, SOL_SOCKET, SO_RCVBUF, v)
            .with_context(|| format!("SO_RCVBUF of {v}"))?,
        Err(e) => return Err(e).with_context(|| format!("SO_RCVBUFFORCE of {v}")),
    }
    setsockopt_int(sock, IPPROTO_TCP, TCP_WINDOW_CLAMP, v)
        .with_context(|| format!("TCP_WINDOW_CLAMP of {bytes}"))
}
