//! The process's `/dev/zeronic` file, opened at its first offload, with
//! its registration cache, and which local addresses are on a ZeroNIC
//! port. A forked child opens its own (`per_proc.rs`).

use crate::per_proc::PerProc;
use crate::state;
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::Arc;
use zn::cache::RegCache;
use zn::Device;

#[derive(Default)]
struct Dev {
    dev: Option<Arc<Device>>,
    failed: bool,
    cache: Option<Arc<RegCache>>,
    /// Local addresses seen, and whether they are on a ZeroNIC port.
    on_port: HashMap<Ipv4Addr, bool>,
}

static DEV: PerProc<Dev> = PerProc::new(|| {});

/// The device (opened at the first call of this process; once failed,
/// not tried again).
pub fn device() -> Option<Arc<Device>> {
    let mut p = DEV.lock();
    if p.dev.is_none() && !p.failed {
        match Device::open(state::config().nic) {
            Ok(d) => {
                p.cache = Some(Arc::new(RegCache::new(d.clone(), 256)));
                p.dev = Some(d);
            }
            Err(e) => {
                p.failed = true;
                state::log(&format!("no offload: {e}"));
            }
        }
    }
    p.dev.clone()
}

/// The registration cache (once the device is open).
pub fn cache() -> Option<Arc<RegCache>> {
    DEV.lock().cache.clone()
}

/// Whether `local` is on a ZeroNIC port: `ask`ed once per address.
pub fn on_port(local: Ipv4Addr, ask: impl FnOnce() -> bool) -> bool {
    *DEV.lock().on_port.entry(local).or_insert_with(ask)
}
