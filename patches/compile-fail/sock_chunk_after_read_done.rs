// expect: error[E0499]
// Patch 0021: a peeked chunk cannot be used once its bytes were consumed (`read_done` frees the
// buffer).
use kernel::net::sock::TcpSock;

fn f(sk: &TcpSock) -> u32 {
    let mut g = sk.lock();
    let chunk = g.recv_skb();
    g.read_done(100);
    chunk.map_or(0, |c| c.len())
}
