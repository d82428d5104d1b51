// expect: error[E0308]
// Patch 0003: NetdevTx::Busy takes only the XmitSkb of this call, not any SkBuff.
use kernel::net::{dev::{NetdevTx, XmitSkb}, skbuff::SkBuff};

fn xmit<'x>(skb: XmitSkb<'x>, other: SkBuff) -> NetdevTx<'x> {
    skb.consume();
    NetdevTx::Busy(other)
}
