// expect: error: cannot construct `XmitSkb<'_>` with struct literal syntax due to private fields
// Patch 0003: drivers cannot make an XmitSkb (E0451 until patches 0033/0034 added the
// private fields it no longer names, which rustc reports without a code).
use kernel::net::{dev::{NetdevTx, XmitSkb}, skbuff::SkBuff};

fn xmit<'x>(skb: XmitSkb<'x>, other: SkBuff) -> NetdevTx<'x> {
    skb.consume();
    NetdevTx::Busy(XmitSkb { skb: other, _brand: core::marker::PhantomData })
}
