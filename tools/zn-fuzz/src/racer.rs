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
    fn ip_link(&self, ns: &str, dev: &str, args: &[&str]) -> bool {
        let mut c = Command::new("ip");
        if !ns.is_empty() {
            c.args(["-n", ns]);
        }
        c.args(["link", "set", "dev", dev])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Races until `deadline`, then leaves the NIC bound.
    pub fn run(&self, seed: u64, deadline: Instant, shared: &Shared) -> Result<()> {
        let mut rng = Rng::stream(seed, 0xffff, 0);
        let mut next_rebind = Instant::now() + Duration::from_millis(rng.range(1000, 4000));
        while Instant::now() < deadline {
            if self.rebind && Instant::now() >= next_rebind {
                if self.bound() {
                    self.write("unbind")?;
                }
                // Calls meet an unbound NIC for a while.
                sleep(Duration::from_millis(rng.below(400)));
                self.write("bind")?;
                if !self.bound() {
                    bail!("{} is not bound after writing bind", self.bdf);
                }
                shared.rebinds.fetch_add(1, Relaxed);
                next_rebind = Instant::now() + Duration::from_millis(rng.range(1000, 5000));
                continue;
            }
            let ns = rng.pick(&self.netns).clone();
            let dev = rng.pick(&self.ifaces).clone();
            if rng.chance(1, 5) {
                if self.ip_link(&ns, &dev, &["down"]) {
                    sleep(Duration::from_millis(rng.below(100)));
                    if self.ip_link(&ns, &dev, &["up"]) {
                        shared.link_flips.fetch_add(1, Relaxed);
                    }
                }
            } else {
                let mtu = match rng.below(8) {
                    0 => 68,
                    1 => 1500,
                    2 => 9000,
                    3 => self.max_mtu,
                    4 => self.max_mtu + 1, // refused
                    _ => rng.range(68, u64::from(self.max_mtu)) as u32,
                };
                if self.ip_link(&ns, &dev, &["mtu", &mtu.to_string()]) {
                    shared.mtu_changes.fetch_add(1, Relaxed);
                }
            }
            sleep(Duration::from_millis(rng.range(50, 300)));
        }
        if !self.bound() {
            self.write("bind")?;
        }
        if !self.bound() {
            bail!("{} is not bound at the end", self.bdf);
        }
        Ok(())
    }
}
