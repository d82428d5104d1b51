//! Log and report lines built on the stack and written with the real
//! `write`: no allocation and no lock, so a wrapper running in a signal
//! handler can log.

use crate::config::Dest;
use crate::real;
use nix::libc;
use std::fmt;

/// A line of at most `N` bytes; what does not fit is cut (diagnostics).
pub struct Line<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> Line<N> {
    pub fn new() -> Self {
        Line {
            buf: [0; N],
            len: 0,
        }
    }

    #[cfg(test)]
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Writes the line, newline-terminated, to `dest`; errors are dropped
    /// (diagnostics only).
    pub fn emit(&mut self, dest: &Dest) {
        if self.len == N {
            self.len -= 1;
        }
        self.buf[self.len] = b'\n';
        self.len += 1;
        let (fd, opened) = match dest {
            Dest::Stderr => (2, false),
            Dest::File(path) => {
                // SAFETY: a NUL-terminated path; open is async-signal-safe.
                let fd = unsafe {
                    libc::open(
                        path.as_ptr(),
                        libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_CLOEXEC,
                        0o644,
                    )
                };
                if fd < 0 {
                    return;
                }
                (fd, true)
            }
        };
        // SAFETY: writing our buffer (one write: O_APPEND keeps lines of
        // several processes whole).
        unsafe { real::write(fd, self.buf.as_ptr().cast(), self.len) };
        if opened {
            // SAFETY: the fd opened above.
            unsafe { real::close(fd) };
        }
    }
}

impl<const N: usize> fmt::Write for Line<N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let n = s.len().min(N - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt::Write;

    #[test]
    fn cuts_what_does_not_fit() {
        let mut l = Line::<8>::new();
        write!(l, "fd {} attached", 12).unwrap();
        assert_eq!(l.as_bytes(), b"fd 12 at");
    }

    #[test]
    fn emits_whole_lines_to_a_file() {
        let dir = std::env::temp_dir().join(format!("zn-shim-line-{}", std::process::id()));
        let path = std::ffi::CString::new(dir.to_str().unwrap()).unwrap();
        let d = Dest::File(path);
        for i in 0..3 {
            let mut l = Line::<64>::new();
            write!(l, "line {i}").unwrap();
            l.emit(&d);
        }
        let mut l = Line::<4>::new();
        write!(l, "long line").unwrap();
        l.emit(&d);
        let got = std::fs::read_to_string(&dir).unwrap();
        std::fs::remove_file(&dir).unwrap();
        assert_eq!(got, "line 0\nline 1\nline 2\nlon\n");
    }
}
