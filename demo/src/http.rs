//! A minimal HTTP/1.1 responder (one request and one response per connection, request head
//! capped at [`MAX_REQUEST_BYTES`]) and the matching one-shot GET client.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use anyhow::{bail, Context, Result};

/// Longest request head we read; a longer one is answered 431 and closed.
pub const MAX_REQUEST_BYTES: usize = 8 * 1024;
/// Longest response body the client reads.
const MAX_RESPONSE_BYTES: u64 = 4 * 1024 * 1024;
/// A client must send its request (and take our answer) within this long.
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// A response: status code, reason and JSON body.
pub struct Response {
    pub status: u16,
    pub reason: &'static str,
    pub body: String,
}

impl Response {
    pub fn json(body: String) -> Response {
        Response {
            status: 200,
            reason: "OK",
            body,
        }
    }
    fn error(status: u16, reason: &'static str) -> Response {
        Response {
            status,
            reason,
            body: format!("{{\"error\":\"{reason}\"}}"),
        }
    }
}

/// Serves `listener` on this thread, one connection at a time, answering `GET <path>` with
/// `route(path)` (`None`: 404). Never returns except on an accept error.
pub fn serve(listener: TcpListener, route: impl Fn(&str) -> Option<Response>) -> Result<()> {
    loop {
        let (mut stream, peer) = listener.accept().context("accepting an HTTP connection")?;
        if let Err(e) = answer(&mut stream, &route) {
            tracing::debug!(%peer, "HTTP connection failed: {e:#}");
        }
    }
}

fn answer(stream: &mut TcpStream, route: &impl Fn(&str) -> Option<Response>) -> Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let response = match read_head(stream)? {
        None => Response::error(431, "Request Header Fields Too Large"),
        Some(head) => match head.split(' ').collect::<Vec<_>>()[..] {
            ["GET", target, version] if version.starts_with("HTTP/1.") => {
                let path = target.split('?').next().unwrap_or(target);
                route(path).unwrap_or_else(|| Response::error(404, "Not Found"))
            }
            [_, _, _] => Response::error(405, "Method Not Allowed"),
            _ => Response::error(400, "Bad Request"),
        },
    };
    let head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        response.status,
        response.reason,
        response.body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(response.body.as_bytes())?;
    Ok(())
}

/// Reads up to the end of the request head; returns its first line, or `None` if the head is
/// longer than [`MAX_REQUEST_BYTES`].
fn read_head(stream: &mut TcpStream) -> Result<Option<String>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        if buf.len() >= MAX_REQUEST_BYTES {
            return Ok(None);
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            bail!("connection closed before the request head ended");
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&buf);
    Ok(Some(head.lines().next().unwrap_or_default().to_string()))
}

/// `GET path` from `addr`; the body of a 200 response, else an error naming the status.
pub fn get(addr: SocketAddr, path: &str) -> Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT).with_context(|| format!("connecting to {addr}"))?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.take(MAX_RESPONSE_BYTES).read_to_string(&mut response)?;
    let (head, body) = response.split_once("\r\n\r\n").context("response has no end of head")?;
    let status = head.lines().next().unwrap_or_default();
    if !status.starts_with("HTTP/1.1 200 ") {
        bail!("GET {path} from {addr}: {status}");
    }
    Ok(body.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            serve(listener, |path| {
                (path == "/stats").then(|| Response::json("{\"ok\":1}".into()))
            })
        });
        addr
    }

    fn raw(addr: SocketAddr, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(request).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn routes_get_and_refuses_the_rest() {
        let addr = server();
        assert_eq!(get(addr, "/stats?x=1").unwrap(), "{\"ok\":1}");
        assert!(get(addr, "/nope").unwrap_err().to_string().contains("404"));
        assert!(raw(addr, b"POST /stats HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405 "));
        assert!(raw(addr, b"garbage\r\n\r\n").starts_with("HTTP/1.1 400 "));
        // Exactly the cap, so the server reads all of it and closes without a reset.
        let mut huge = b"GET /stats HTTP/1.1\r\nX: ".to_vec();
        huge.resize(MAX_REQUEST_BYTES, b'a');
        assert!(raw(addr, &huge).starts_with("HTTP/1.1 431 "));
    }
}
