// expect: error[E0596]
// Patch 0003: XmitSkb dereferences to &SkBuff only, so the buffer inside cannot be exchanged.
use kernel::net::{dev::{NetdevTx, XmitSkb}, skbuff::SkBuff};

fn xmit<'x>(mut skb: XmitSkb<'x>, other: &mut SkBuff) -> NetdevTx<'x> {
    core::mem::swap(&mut *skb, other);
    NetdevTx::Busy(skb)
}
