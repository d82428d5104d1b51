// expect: error[E0521]
// Patch 0024: an ExtAck is the request's; it cannot be kept past the callback
// (the core frees or reuses the structure once the request is answered).
use kernel::{net::netlink::ExtAck, sync::SpinLock};

fn keep(extack: ExtAck<'_>, kept: &SpinLock<Option<ExtAck<'static>>>) {
    *kept.lock() = Some(extack);
}
