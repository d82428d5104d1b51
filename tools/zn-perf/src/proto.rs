//! The control connection between client and server: JSON lines.
//!
//! Per test, over one control connection (the data connections carry
//! nothing but the payload, so no byte arrives before an attach):
//!
//! ```text
//! client                               server
//!   test {spec}                  ->
//!                                <-    ready          (accepting data connections)
//!   connect N data connections
//!   conns {ports}                ->                   (the client's local ports, flow order)
//!                                <-    attached       (server end prepared: attach, post)
//!   prepare (attach, post); go   ->
//!   run                                run
//!                                <-    result {side}
//! ```
//!
//! Either side may send `error {message}` instead of its next message.
//! `hello` opens the connection, `bye` ends it.

use crate::report::{SideResult, TestSpec};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;

/// Protocol version (2: `TestSpec::bidir`; 3: `TestSpec::hash`).
pub const PROTO: u32 = 3;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub enum Msg {
    Hello { proto: u32 },
    Test { spec: TestSpec },
    Ready,
    Conns { ports: Vec<u16> },
    Attached,
    Go,
    Result { side: Box<SideResult> },
    Error { message: String },
    Bye,
}

/// One end of the control connection.
pub struct Ctrl {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Ctrl {
    pub fn new(s: TcpStream) -> Result<Self> {
        s.set_nodelay(true)
            .context("TCP_NODELAY on the control connection")?;
        let w = s.try_clone().context("dup of the control socket")?;
        Ok(Self {
            r: BufReader::new(s),
            w,
        })
    }

    pub fn send(&mut self, m: &Msg) -> Result<()> {
        let mut line = serde_json::to_string(m).context("encoding a control message")?;
        line.push('\n');
        self.w
            .write_all(line.as_bytes())
            .context("writing to the control connection")
    }

    /// The next message; `None` when the peer closed the connection.
    pub fn recv_opt(&mut self) -> Result<Option<Msg>> {
        let mut line = String::new();
        let n = self
            .r
            .read_line(&mut line)
            .context("reading the control connection")?;
        if n == 0 {
            return Ok(None);
        }
        let m = serde_json::from_str(line.trim_end())
            .with_context(|| format!("bad control message {:?}", line.trim_end()))?;
        Ok(Some(m))
    }

    /// The next message, which must come; a peer's `error` is an error.
    pub fn recv(&mut self, what: &str) -> Result<Msg> {
        match self.recv_opt()? {
            None => bail!("the peer closed the control connection (waiting for {what})"),
            Some(Msg::Error { message }) => bail!("peer: {message}"),
            Some(m) => Ok(m),
        }
    }

    /// Sends `error` for `e` (best effort).
    pub fn send_error(&mut self, e: &anyhow::Error) {
        let _ = self.send(&Msg::Error {
            message: format!("{e:#}"),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_tagged_json_lines() {
        let m = Msg::Conns { ports: vec![1, 2] };
        let s = serde_json::to_string(&m).unwrap();
        assert_eq!(s, r#"{"msg":"conns","ports":[1,2]}"#);
        assert_eq!(serde_json::from_str::<Msg>(&s).unwrap(), m);
        assert_eq!(serde_json::to_string(&Msg::Go).unwrap(), r#"{"msg":"go"}"#);
    }

    #[test]
    fn round_trip_over_a_socket() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let mut c = Ctrl::new(l.accept().unwrap().0).unwrap();
            let m = c.recv("hello").unwrap();
            c.send(&m).unwrap();
            c.send(&Msg::Error {
                message: "nope".into(),
            })
            .unwrap();
        });
        let mut c = Ctrl::new(TcpStream::connect(a).unwrap()).unwrap();
        c.send(&Msg::Hello { proto: PROTO }).unwrap();
        assert_eq!(c.recv("echo").unwrap(), Msg::Hello { proto: PROTO });
        let e = c.recv("x").unwrap_err();
        assert!(format!("{e:#}").contains("nope"));
        t.join().unwrap();
        assert!(c.recv_opt().unwrap().is_none());
    }
}
