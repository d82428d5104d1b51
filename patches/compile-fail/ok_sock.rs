// expect: builds
// The correct use of patches 0020, 0021 and 0023: read state and consume under the lock, peek
// then consume, look a send up through a borrowed buffer.
use kernel::net::{
    skbuff::SkBuff,
    sock::{SocketFile, TcpState},
    tcp::Piece,
    ubuf::{UbufComplete, UbufOps},
};

struct Send0(u32);

#[vtable]
impl UbufComplete for Send0 {
    fn complete(self, _zerocopy: bool) {}
}

static OPS: UbufOps<Send0> = UbufOps::new();

fn f(fd: i32, skb: &SkBuff) -> Result<usize> {
    let file = SocketFile::lookup(fd)?;
    let sk = file.sk().as_tcp().ok_or(EINVAL)?;
    let mut g = sk.lock();
    if g.state() != TcpState::Established {
        return Err(ENOTCONN);
    }
    let n = g.read_sock(|chunk| {
        let mut used = 0;
        for piece in chunk.pieces() {
            if let Piece::Page { len, .. } = piece {
                used += len as usize;
            }
        }
        used
    })?;
    let peeked = g.recv_skb().map_or(0, |c| c.len());
    g.read_done(peeked as usize);
    drop(g);
    Ok(n + OPS.lookup(skb).map_or(0, |s| s.0 as usize))
}
