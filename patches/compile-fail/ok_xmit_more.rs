// expect: builds
// The correct use of patches 0033 and 0034: account the buffer to BQL and
// ring the doorbell when it says so; complete and reset from elsewhere.
use kernel::net::dev::{NetDevice, NetdevTx, XmitSkb};

fn xmit<'x>(skb: XmitSkb<'x>, ring_doorbell: impl Fn()) -> NetdevTx<'x> {
    let more = skb.xmit_more();
    if skb.sent_queue(skb.len()) || !more {
        ring_doorbell();
    }
    skb.consume();
    NetdevTx::Ok
}

fn completed(dev: &NetDevice, pkts: u32, bytes: u32) -> Result {
    dev.tx_completed_queue(0, pkts, bytes)
}

fn reset(dev: &NetDevice) -> Result {
    dev.tx_reset_queue(0)
}
