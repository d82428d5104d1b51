// expect: builds
// The correct use of patch 0024's ExtAck: a message that lives for good.
use kernel::net::netlink::ExtAck;

fn refuse(extack: &mut ExtAck<'_>) -> Result {
    extack.set_msg(c"rings have at least 16 entries");
    Err(EINVAL)
}
