// expect: error[E0080]
// Patch 0027: a device that implements set_coalesce() without naming the
// parameters it supports would be refused at registration (with a WARN);
// building one does not compile ("a NetDeviceOps with set_coalesce() must
// set SUPPORTED_COALESCE_PARAMS").
use kernel::net::{
    dev::{ethtool::Coalesce, Builder, NetDevice, NetDeviceOps, NetdevTx, XmitSkb},
    netlink::ExtAck,
};

struct Dev;

#[vtable]
impl NetDeviceOps for Dev {
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
