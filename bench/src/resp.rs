//! A minimal RESP2 client over a tokio `TcpStream`. Every approach, recipe or relock, is driven
//! through this same code, so the client's own cost is the same for all of them; and each
//! connection is its own socket, which blocking commands (`LOCK.WAIT`) and `SUBSCRIBE` need.

use std::io;
use std::time::Duration;

use relock_protocol::Command;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A relock command's argv as text (the bench's keys and owners are): for a command line
/// (redis-benchmark) or a message, written by relock-protocol's type for it.
pub fn words<'a>(command: &impl Command<'a>) -> Vec<String> {
    command
        .to_args()
        .into_iter()
        .map(|w| String::from_utf8_lossy(&w).into_owned())
        .collect()
}

/// One RESP2 reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Nil,
    Int(i64),
    Status(String),
    Bulk(Vec<u8>),
    Error(String),
    Array(Vec<Reply>),
}

impl Reply {
    pub fn is_nil(&self) -> bool {
        matches!(self, Reply::Nil)
    }

    /// The reply as text (status or bulk), for INFO and the like.
    pub fn text(&self) -> String {
        match self {
            Reply::Status(s) | Reply::Error(s) => s.clone(),
            Reply::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
            Reply::Int(n) => n.to_string(),
            Reply::Nil => String::new(),
            Reply::Array(items) => items.iter().map(Reply::text).collect::<Vec<_>>().join(" "),
        }
    }

    pub fn int(&self) -> Option<i64> {
        match self {
            Reply::Int(n) => Some(*n),
            Reply::Bulk(b) => std::str::from_utf8(b).ok()?.parse().ok(),
            _ => None,
        }
    }
}

/// Turns an error reply into an `io::Error`, so a broken benchmark stops instead of counting
/// errors as operations.
pub fn ok(reply: Reply) -> io::Result<Reply> {
    match reply {
        Reply::Error(e) => Err(io::Error::other(format!("server error: {e}"))),
        r => Ok(r),
    }
}

/// A connection with a write buffer (commands are queued with [`Conn::push`] and sent together
/// by [`Conn::flush`], which is how pipelining is done) and a read buffer.
pub struct Conn {
    stream: TcpStream,
    wbuf: Vec<u8>,
    rbuf: Vec<u8>,
    rpos: usize,
}

impl Conn {
    pub async fn connect(port: u16) -> io::Result<Conn> {
        let mut attempt = 0;
        let stream = loop {
            match TcpStream::connect(("127.0.0.1", port)).await {
                Ok(s) => break s,
                // Many connections opened at once can overflow the listen backlog briefly.
                Err(e) if attempt < 50 => {
                    attempt += 1;
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(e) => return Err(e),
            }
        };
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            wbuf: Vec::with_capacity(4096),
            rbuf: Vec::with_capacity(4096),
            rpos: 0,
        })
    }

    /// Queues one command (not sent until [`Conn::flush`]).
    pub fn push<A: AsRef<[u8]>>(&mut self, args: &[A]) {
        use std::io::Write as _;
        // Writing into a Vec cannot fail.
        let _ = write!(self.wbuf, "*{}\r\n", args.len());
        for a in args {
            let a = a.as_ref();
            let _ = write!(self.wbuf, "${}\r\n", a.len());
            self.wbuf.extend_from_slice(a);
            self.wbuf.extend_from_slice(b"\r\n");
        }
    }

    pub async fn flush(&mut self) -> io::Result<()> {
        if !self.wbuf.is_empty() {
            self.stream.write_all(&self.wbuf).await?;
            self.wbuf.clear();
        }
        Ok(())
    }

    /// Reads the next reply (a pipelined reply, or a pub/sub message).
    pub async fn read(&mut self) -> io::Result<Reply> {
        loop {
            if let Some((reply, used)) = parse(&self.rbuf[self.rpos..])? {
                self.rpos += used;
                if self.rpos == self.rbuf.len() {
                    self.rbuf.clear();
                    self.rpos = 0;
                }
                return Ok(reply);
            }
            if self.rpos > 0 {
                self.rbuf.drain(..self.rpos);
                self.rpos = 0;
            }
            let mut chunk = [0u8; 16 * 1024];
            let n = self.stream.read(&mut chunk).await?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "server closed the connection",
                ));
            }
            self.rbuf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Sends one command and reads its reply.
    pub async fn cmd<A: AsRef<[u8]>>(&mut self, args: &[A]) -> io::Result<Reply> {
        self.push(args);
        self.flush().await?;
        self.read().await
    }

    /// Like [`Conn::cmd`], but an error reply is an error.
    pub async fn ok<A: AsRef<[u8]>>(&mut self, args: &[A]) -> io::Result<Reply> {
        ok(self.cmd(args).await?)
    }
}

fn line(buf: &[u8]) -> Option<(&[u8], usize)> {
    let end = buf.windows(2).position(|w| w == b"\r\n")?;
    Some((&buf[..end], end + 2))
}

fn number(bytes: &[u8]) -> io::Result<i64> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad RESP number"))
}

/// Parses one reply from the front of `buf`: `Ok(None)` when more bytes are needed.
fn parse(buf: &[u8]) -> io::Result<Option<(Reply, usize)>> {
    let Some(&kind) = buf.first() else {
        return Ok(None);
    };
    let Some((head, head_len)) = line(&buf[1..]) else {
        return Ok(None);
    };
    let head_len = head_len + 1;
    let text = || String::from_utf8_lossy(head).into_owned();
    Ok(Some(match kind {
        b'+' => (Reply::Status(text()), head_len),
        b'-' => (Reply::Error(text()), head_len),
        b':' => (Reply::Int(number(head)?), head_len),
        b'$' => {
            let len = number(head)?;
            if len < 0 {
                return Ok(Some((Reply::Nil, head_len)));
            }
            let len = len as usize;
            if buf.len() < head_len + len + 2 {
                return Ok(None);
            }
            (
                Reply::Bulk(buf[head_len..head_len + len].to_vec()),
                head_len + len + 2,
            )
        }
        b'*' => {
            let len = number(head)?;
            if len < 0 {
                return Ok(Some((Reply::Nil, head_len)));
            }
            let mut used = head_len;
            let mut items = Vec::with_capacity(len as usize);
            for _ in 0..len {
                match parse(&buf[used..])? {
                    Some((item, n)) => {
                        items.push(item);
                        used += n;
                    }
                    None => return Ok(None),
                }
            }
            (Reply::Array(items), used)
        }
        other => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("unexpected RESP type byte {other:#x}"),
            ))
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_kind_and_waits_for_more() {
        let cases: &[(&[u8], Option<Reply>)] = &[
            (b"+OK\r\n", Some(Reply::Status("OK".into()))),
            (b":42\r\n", Some(Reply::Int(42))),
            (b"$-1\r\n", Some(Reply::Nil)),
            (b"$3\r\nabc\r\n", Some(Reply::Bulk(b"abc".to_vec()))),
            (b"$3\r\nab", None),
            (b"-ERR x\r\n", Some(Reply::Error("ERR x".into()))),
            (
                b"*2\r\n:1\r\n$-1\r\n",
                Some(Reply::Array(vec![Reply::Int(1), Reply::Nil])),
            ),
            (b"*2\r\n:1\r\n", None),
        ];
        for (input, want) in cases {
            let got = parse(input).unwrap().map(|(r, _)| r);
            assert_eq!(&got, want, "{}", String::from_utf8_lossy(input));
        }
    }
}
