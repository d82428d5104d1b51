// expect: error[E0521]
// Patch 0024: the core keeps the message's pointer past the callback, so a
// borrowed message (here, the caller's) must not be accepted.
use kernel::net::netlink::ExtAck;

fn refuse(extack: &mut ExtAck<'_>, why: &CStr) {
    extack.set_msg(why);
}
