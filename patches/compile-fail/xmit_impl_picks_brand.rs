// expect: error[E0308]
// Patch 0003: start_xmit must be generic over the brand; an impl cannot fix it.
use kernel::net::dev::{NetDevice, NetDeviceOps, NetdevTx, XmitSkb};

struct Port;

#[vtable]
impl NetDeviceOps for Port {
    fn start_xmit(_dev: &NetDevice, _this: Pin<&Self>, skb: XmitSkb<'static>) -> NetdevTx<'static> {
        NetdevTx::Busy(skb)
    }
}
