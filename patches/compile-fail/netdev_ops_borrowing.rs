// expect: error[E0478]
// Patch 0003: private data is 'static; a leaked Registration keeps its callbacks running.
use kernel::net::dev::{NetDevice, NetDeviceOps, NetdevTx, XmitSkb};

struct Port<'a>(&'a u32);

#[vtable]
impl<'a> NetDeviceOps for Port<'a> {
    fn start_xmit<'x>(_dev: &NetDevice, _this: Pin<&Self>, skb: XmitSkb<'x>) -> NetdevTx<'x> {
        NetdevTx::Busy(skb)
    }
}
