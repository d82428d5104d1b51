// expect: error[E0451]
// Patch 0003: drivers cannot make an XmitSkb.
use kernel::net::{dev::{NetdevTx, XmitSkb}, skbuff::SkBuff};

fn xmit<'x>(skb: XmitSkb<'x>, other: SkBuff) -> NetdevTx<'x> {
    skb.consume();
    NetdevTx::Busy(XmitSkb { skb: other, _brand: core::marker::PhantomData })
}
