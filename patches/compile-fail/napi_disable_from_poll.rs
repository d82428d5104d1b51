// expect: error[E0599]
// Patch 0005: poll gets the poller data, not the Napi, whose enable/disable sleep.
use kernel::net::napi::{NapiContext, NapiPoller};

struct Queues;

impl NapiPoller for Queues {
    fn poll(this: &Self, _ctx: &mut NapiContext<'_>, _budget: i32) -> i32 {
        this.disable();
        0
    }
}
