//! The racer process: while the workers call, it unbinds and binds the NIC's
//! PCI function through sysfs, changes the ports' MTUs and takes them down
//! and up; at the end it leaves the NIC bound.

use std::fs::{self, File};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use nix::errno::Errno;
use nix::sched::{setns, CloneFlags};
use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};

use crate::errnos::ErrnoName;

use crate::rng::Rng;
use crate::shared::Shared;

/// What the racer works on.
pub struct Racer {
    /// The PCI function (sysfs path or BDF).
    pub bdf: String,
    /// Network namespaces the ports may be in ("" is the racer's own).
    pub netns: Vec<String>,
    /// Names the ports may have.
    pub ifaces: Vec<String>,
    /// Whether to unbind and bind.
    pub rebind: bool,
    /// Largest MTU the ports accept.
    pub max_mtu: u32,
    /// Run with `bash -c` after each bind.
    pub after_bind: Option<String>,
}

const DRV: &str = "/sys/bus/pci/drivers/zeronic";

/// What the link changes did, for the summary.
#[derive(Default)]
struct IpLog {
    runs: u64,
    /// "what errno" -> count.
    errors: Vec<(String, u64)>,
    last: Option<Errno>,
}

impl IpLog {
    /// Counts one ioctl's result; whether it succeeded.
    fn note(&mut self, _dev: &str, what: &str, r: Result<(), Errno>) -> bool {
        self.runs += 1;
        self.last = r.err();
        let Err(e) = r else { return true };
        let k = format!("{what} {}", e.name());
        match self.errors.iter_mut().find(|(x, _)| *x == k) {
            Some((_, n)) => *n += 1,
            None => self.errors.push((k, 1)),
        }
        false
    }
}

/// Unbind/bind writes slower than this are reported.
const SLOW: Duration = Duration::from_secs(20);

impl Racer {
    fn bound(&self) -> bool {
        Path::new(DRV).join(&self.bdf).exists()
    }

    fn write(&self, what: &str) -> Result<Duration> {
        let t = Instant::now();
        fs::write(PathBuf::from(DRV).join(what), &self.bdf)
            .with_context(|| format!("writing {} to {DRV}/{what}", self.bdf))?;
        let d = t.elapsed();
        if d > SLOW {
            println!("zn-fuzz: racer: {what} took {:.1}s", d.as_secs_f64());
        }
        Ok(d)
    }

    /// One socket per namespace of the ports (created inside it, so its
    /// interface ioctls act there): MTU and up/down changes are two
    /// syscalls, not an `ip` process, which a guest busy with the workers
    /// takes seconds to start.
    fn ns_sockets(&self) -> Result<Vec<(String, OwnedFd)>> {
        let home = File::open("/proc/self/ns/net").context("open /proc/self/ns/net")?;
        let mut out = Vec::new();
        for ns in &self.netns {
            if !ns.is_empty() {
                let f = File::open(format!("/run/netns/{ns}"))
                    .with_context(|| format!("open /run/netns/{ns}"))?;
                setns(&f, CloneFlags::CLONE_NEWNET).with_context(|| format!("setns {ns}"))?;
            }
            let sock = socket(
                AddressFamily::Inet,
                SockType::Datagram,
                SockFlag::SOCK_CLOEXEC,
                None,
            );
            if !ns.is_empty() {
                setns(&home, CloneFlags::CLONE_NEWNET).context("setns back")?;
            }
            out.push((ns.clone(), sock.context("socket")?));
        }
        Ok(out)
    }

    /// An interface ioctl (`SIOCSIFMTU`, `SIOCGIFFLAGS`, `SIOCSIFFLAGS`)
    /// on `dev` through `sock`; the value it read or was given.
    fn ifreq(sock: &OwnedFd, dev: &str, req: libc::c_ulong, val: i32) -> Result<i32, Errno> {
        #[repr(C)]
        struct IfReq {
            name: [u8; libc::IFNAMSIZ],
            val: i32,
            pad: [u8; 20],
        }
        let mut r = IfReq {
            name: [0; libc::IFNAMSIZ],
            val,
            pad: [0; 20],
        };
        let n = dev.len().min(libc::IFNAMSIZ - 1);
        r.name[..n].copy_from_slice(&dev.as_bytes()[..n]);
        // SAFETY: `r` is a struct ifreq (name, then the int/short union) the
        // kernel reads and writes within its 40 bytes.
        let rc = unsafe { libc::ioctl(sock.as_raw_fd(), req, &raw mut r) };
        if rc < 0 {
            Err(Errno::last())
        } else {
            Ok(r.val)
        }
    }

    /// Sets the MTU of `dev` through `sock`.
    fn set_mtu(sock: &OwnedFd, dev: &str, mtu: u32, log: &mut IpLog) -> bool {
        log.note(
            dev,
            "mtu",
            Self::ifreq(sock, dev, libc::SIOCSIFMTU, mtu as i32).map(drop),
        )
    }

    /// Takes `dev` down and up again through `sock`.
    fn flip(sock: &OwnedFd, dev: &str, pause: Duration, log: &mut IpLog) -> bool {
        let Ok(flags) = Self::ifreq(sock, dev, libc::SIOCGIFFLAGS, 0) else {
            return false;
        };
        let up = libc::IFF_UP;
        let down = Self::ifreq(sock, dev, libc::SIOCSIFFLAGS, flags & !up).map(drop);
        if !log.note(dev, "down", down) {
            return false;
        }
        sleep(pause);
        log.note(
            dev,
            "up",
            Self::ifreq(sock, dev, libc::SIOCSIFFLAGS, flags | up).map(drop),
        )
    }

    /// Unbinds and binds until `deadline`.
    fn rebind_loop(&self, rng: &mut Rng, deadline: Instant, shared: &Shared) -> Result<()> {
        let mut slowest = Duration::ZERO;
        while Instant::now() < deadline {
            // Bound most of the time, so calls reach a working NIC too.
            sleep(Duration::from_millis(rng.range(2000, 6000)));
            if Instant::now() >= deadline {
                break;
            }
            let mut took = Duration::ZERO;
            if self.bound() {
                took += self.write("unbind")?;
            }
            // Calls meet an unbound NIC for a while.
            sleep(Duration::from_millis(rng.below(300)));
            took += self.write("bind")?;
            if !self.bound() {
                bail!("{} is not bound after writing bind", self.bdf);
            }
            slowest = slowest.max(took);
            shared.rebinds.fetch_add(1, Relaxed);
            if let Some(cmd) = &self.after_bind {
                let st = std::process::Command::new("bash")
                    .args(["-c", cmd])
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .status();
                if !st.as_ref().is_ok_and(|s| s.success()) {
                    println!("zn-fuzz: racer: after bind, '{cmd}' failed: {st:?}");
                }
            }
        }
        println!(
            "zn-fuzz: racer: slowest unbind + bind {:.1}s",
            slowest.as_secs_f64()
        );
        Ok(())
    }

    /// Changes MTUs and takes ports down and up until `deadline`. The ports
    /// move (a rebind makes new ones in the racer's namespace): an attempt
    /// that fails tries the other (namespace, name) pairs.
    fn link_loop(&self, rng: &mut Rng, deadline: Instant, shared: &Shared) -> Result<()> {
        let mut log = IpLog::default();
        let socks = self.ns_sockets()?;
        let mut pairs: Vec<(&OwnedFd, &str, &str)> = Vec::new();
        for (ns, sock) in &socks {
            for dev in &self.ifaces {
                pairs.push((sock, ns, dev));
            }
        }
        while Instant::now() < deadline {
            let flip = rng.chance(1, 5);
            let mtu = match rng.below(8) {
                0 => 68,
                1 => 1500,
                2 => 9000,
                3 => self.max_mtu,
                4 => self.max_mtu + 1, // refused
                _ => rng.range(68, u64::from(self.max_mtu)) as u32,
            };
            let pause = Duration::from_millis(rng.below(100));
            let start = rng.below(pairs.len() as u64) as usize;
            for i in 0..pairs.len() {
                let (sock, _ns, dev) = pairs[(start + i) % pairs.len()];
                if flip {
                    if Self::flip(sock, dev, pause, &mut log) {
                        shared.link_flips.fetch_add(1, Relaxed);
                        break;
                    }
                } else if Self::set_mtu(sock, dev, mtu, &mut log) {
                    shared.mtu_changes.fetch_add(1, Relaxed);
                    break;
                } else if mtu > self.max_mtu && log.last != Some(Errno::ENODEV) {
                    break; // refused, as it must be
                }
            }
            sleep(Duration::from_millis(rng.range(20, 200)));
        }
        println!(
            "zn-fuzz: racer: {} interface ioctls; errors: {}",
            log.runs,
            if log.errors.is_empty() {
                "none".to_string()
            } else {
                log.errors
                    .iter()
                    .map(|(k, n)| format!("{k} {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        );
        Ok(())
    }

    /// Races until `deadline` (rebinding and link changes in two threads),
    /// then leaves the NIC bound.
    pub fn run(&self, seed: u64, deadline: Instant, shared: &Shared) -> Result<()> {
        let mut rng = Rng::stream(seed, 0xffff, 0);
        let mut rng2 = Rng::stream(seed, 0xffff, 1);
        let res = std::thread::scope(|s| {
            let links = (!self.ifaces.is_empty())
                .then(|| s.spawn(|| self.link_loop(&mut rng2, deadline, shared)));
            let r = if self.rebind {
                self.rebind_loop(&mut rng, deadline, shared)
            } else {
                Ok(())
            };
            let l = links.map_or(Ok(()), |h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("the link thread panicked")))
            });
            r.and(l)
        });
        if self.rebind && !self.bound() {
            self.write("bind")?;
            if !self.bound() {
                bail!("{} is not bound at the end", self.bdf);
            }
        }
        res
    }
}
