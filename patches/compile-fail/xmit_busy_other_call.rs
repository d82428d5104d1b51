// expect: error: lifetime may not live long enough
// Patch 0003: the buffer of another call has another brand ('x is invariant).
use kernel::net::dev::{NetdevTx, XmitSkb};

fn xmit<'x, 'y>(skb: XmitSkb<'x>, earlier: XmitSkb<'y>) -> NetdevTx<'x> {
    skb.consume();
    NetdevTx::Busy(earlier)
}
