// expect: error[E0515]
// Patch 0023: the send state found through a buffer is borrowed from that buffer.
use kernel::net::{
    skbuff::SkBuff,
    ubuf::{UbufComplete, UbufOps},
};

struct Send0;

#[vtable]
impl UbufComplete for Send0 {
    fn complete(self, _zerocopy: bool) {}
}

static OPS: UbufOps<Send0> = UbufOps::new();

fn f(skb: SkBuff) -> Option<&'static Send0> {
    OPS.lookup(&skb)
}
