// expect: error[E0277]
// Patch 0033: an XmitSkb stays in the context of its call (xmit_more() and
// sent_queue() read that CPU's transmit state), so it is not Send.
use kernel::net::dev::XmitSkb;

fn send_away<T: Send>(_t: T) {}

fn xmit<'x>(skb: XmitSkb<'x>) {
    send_away(skb);
}
