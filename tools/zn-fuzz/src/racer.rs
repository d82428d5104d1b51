//! The racer process: while the workers call, it unbinds and binds the NIC's
//! PCI function through sysfs, changes the ports' MTUs and takes them down
//! and up; at the end it leaves the NIC bound.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering::Relaxed;
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

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
}

const DRV: &str = "/sys/bus/pci/drivers/zeronic";

/// What the link changes did, for the summary.
#[derive(Default)]
struct IpLog {
    runs: u64,
    samples: Vec<String>,
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

    /// `ip [-n NS] link set dev DEV ARGS...`; whether it succeeded.
    fn ip_link(&self, ns: &str, dev: &str, args: &[&str], log: &mut IpLog) -> bool {
        let mut c = Command::new("ip");
        if !ns.is_empty() {
            c.args(["-n", ns]);
        }
        let out = c
            .args(["link", "set", "dev", dev])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output();
        log.runs += 1;
        match out {
            Ok(o) if o.status.success() => true,
            other => {
                let why = match other {
                    Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
                    Err(e) => e.to_string(),
                };
                let what = format!(
                    "ip {}link set dev {dev} {}: {why}",
                    if ns.is_empty() {
                        String::new()
                    } else {
                        format!("-n {ns} ")
                    },
                    args.join(" ")
                );
                if log.samples.len() < 3 && !log.samples.iter().any(|s| s.ends_with(&why)) {
                    log.samples.push(what);
                }
                false
            }
        }
    }

    /// Unbinds and binds until `deadline`.
    fn rebind_loop(&self, rng: &mut Rng, deadline: Instant, shared: &Shared) -> Result<()> {
        let mut slowest = Duration::ZERO;
        while Instant::now() < deadline {
            sleep(Duration::from_millis(rng.range(1000, 4000)));
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
    fn link_loop(&self, rng: &mut Rng, deadline: Instant, shared: &Shared) {
        let mut log = IpLog::default();
        let mut pairs: Vec<(String, String)> = Vec::new();
        for ns in &self.netns {
            for dev in &self.ifaces {
                pairs.push((ns.clone(), dev.clone()));
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
            let start = rng.below(pairs.len() as u64) as usize;
            for i in 0..pairs.len() {
                let (ns, dev) = &pairs[(start + i) % pairs.len()];
                if flip {
                    if self.ip_link(ns, dev, &["down"], &mut log) {
                        sleep(Duration::from_millis(rng.below(100)));
                        if self.ip_link(ns, dev, &["up"], &mut log) {
                            shared.link_flips.fetch_add(1, Relaxed);
                        }
                        break;
                    }
                } else if self.ip_link(ns, dev, &["mtu", &mtu.to_string()], &mut log) {
                    shared.mtu_changes.fetch_add(1, Relaxed);
                    break;
                } else if mtu > self.max_mtu {
                    break; // refused, as it must be
                }
            }
            sleep(Duration::from_millis(rng.range(20, 200)));
        }
        println!(
            "zn-fuzz: racer: {} ip commands; failures seen: {}",
            log.runs,
            if log.samples.is_empty() {
                "none".to_string()
            } else {
                log.samples.join("; ")
            }
        );
    }

    /// Races until `deadline` (rebinding and link changes in two threads),
    /// then leaves the NIC bound.
    pub fn run(&self, seed: u64, deadline: Instant, shared: &Shared) -> Result<()> {
        let mut rng = Rng::stream(seed, 0xffff, 0);
        let mut rng2 = Rng::stream(seed, 0xffff, 1);
        let res = std::thread::scope(|s| {
            if !self.ifaces.is_empty() {
                s.spawn(|| self.link_loop(&mut rng2, deadline, shared));
            }
            if self.rebind {
                self.rebind_loop(&mut rng, deadline, shared)
            } else {
                Ok(())
            }
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
