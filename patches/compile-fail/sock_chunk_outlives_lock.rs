// expect: error[E0597]
// Patch 0021: a chunk of the receive queue cannot outlive the socket lock.
use kernel::net::sock::TcpSock;

fn f(sk: &TcpSock) -> u32 {
    let chunk;
    {
        let mut g = sk.lock();
        chunk = g.recv_skb();
    }
    chunk.map_or(0, |c| c.len())
}
