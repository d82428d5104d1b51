// expect: error[E0277]
// Patch 0020: the socket lock belongs to the context that took it; its guard cannot move to
// another thread.
use kernel::net::sock::TcpSock;

fn need_send<T: Send>(_: T) {}

fn f(sk: &TcpSock) {
    need_send(sk.lock());
}
