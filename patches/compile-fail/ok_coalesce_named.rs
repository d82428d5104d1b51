// expect: builds
// The correct use of patch 0027: set_coalesce() with the parameters it
// supports named.
use kernel::net::{
    dev::{ethtool::{Coalesce, CoalesceParams}, Builder, NetDevice, NetDeviceOps, NetdevTx, XmitSkb},
    netlink::ExtAck,
};

struct Dev;

#[vtable]
impl NetDeviceOps for Dev {
    const SUPPORTED_COALESCE_PARAMS: CoalesceParams = CoalesceParams::RX_USECS;

    fn start_xmit<'x>(_dev: &NetDevice, _this: Pin<&Self>, skb: XmitSkb<'x>) -> NetdevTx<'x> {
        skb.consume();
        NetdevTx::Ok
    }

    fn get_coalesce(
        _dev: &NetDevice,
        _this: Pin<&Self>,
        _c: &mut Coalesce,
        _extack: &mut ExtAck<'_>,
    ) -> Result {
        Ok(())
    }

    fn set_coalesce(
        _dev: &NetDevice,
        _this: Pin<&Self>,
        _c: &Coalesce,
        _extack: &mut ExtAck<'_>,
    ) -> Result {
        Ok(())
    }
}

#[no_mangle]
pub fn zn_build_dev() -> Result<Builder<Dev>> {
    Builder::new(1, 1, Dev)
}
