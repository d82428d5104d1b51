// expect: error[E0521]
// Patch 0003: an XmitSkb cannot be kept past its call (to return it from a later one).
use kernel::{net::dev::XmitSkb, sync::SpinLock};

fn xmit<'x>(skb: XmitSkb<'x>, kept: &SpinLock<Option<XmitSkb<'static>>>) {
    *kept.lock() = Some(skb);
}
