// expect: builds
// The correct use of patch 0003's XmitSkb: hand back the buffer of this call, or take it.
use kernel::net::dev::{NetdevTx, XmitSkb};

fn xmit<'x>(skb: XmitSkb<'x>, ring_full: bool) -> NetdevTx<'x> {
    if ring_full {
        return NetdevTx::Busy(skb);
    }
    skb.consume();
    NetdevTx::Ok
}
