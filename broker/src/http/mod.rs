//! The HTTP server on `metrics.listen`: `/metrics`, the console page and its JSON. Read-only:
//! GET only. Deliberately small (one request per connection, `Connection: close`) and bounded
//! like the Kafka side: at most `metrics.max.connections` served at once, a request head of at
//! most [`MAX_HEAD_BYTES`] that must arrive within [`HEAD_TIMEOUT`], no request body read.
//!
//! It shows topic names, group members and lag, so it can be secured like the Kafka listeners:
//! `metrics.ssl.enable` serves it over TLS with the broker's `ssl.*` certificate, and
//! `metrics.authentication=scram` asks for HTTP Basic credentials of a SCRAM user (checked as
//! SASL/PLAIN checks them; with an authorizer the user needs DESCRIBE on the cluster). Brokers'
//! consoles ask each other with the brokers' own credential.

pub mod console;
pub mod exposition;
pub mod sampler;
pub mod snapshot;

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

use crate::broker::Broker;
use crate::config::security::MetricsAuthentication;
use crate::controller::acls::CLUSTER_NAME;
use crate::metadata::acls::{AclOperation, ResourceType};

/// Longest request line plus headers accepted; a longer head is answered 431.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
/// How long a client may take to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long writing a response may take before the connection is dropped.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// The console, embedded at build time: one self-contained page, no external resources.
const CONSOLE_PAGE: &str = include_str!("console.html");

/// Serves until `shutdown` turns true.
pub async fn serve(broker: Arc<Broker>, listener: TcpListener, mut shutdown: watch::Receiver<bool>) {
    let slots = Arc::new(Semaphore::new(broker.config.metrics_max_connections));
    let mut connections = tokio::task::JoinSet::new();
    loop {
        // Waiting for a slot before accepting leaves excess clients in the listen backlog.
        let slot = tokio::select! {
            _ = shutdown.changed() => break,
            slot = slots.clone().acquire_owned() => match slot { Ok(slot) => slot, Err(_) => break },
        };
        let accepted = tokio::select! {
            _ = shutdown.changed() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                let broker = broker.clone();
                connections.spawn(async move {
                    accept_connection(&broker, stream, peer).await;
                    drop(slot);
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "metrics.listen: accept failed; retrying shortly (check the open-file limit)");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    connections.abort_all();
}

/// A parsed request head: method and path (query string dropped), and the `Authorization`
/// header's value if any.
#[derive(Debug, PartialEq, Eq)]
struct Head<'a> {
    method: &'a str,
    path: &'a str,
    authorization: Option<&'a str>,
}

/// Serves one connection, after a TLS handshake when `metrics.ssl.enable` is set.
async fn accept_connection(broker: &Arc<Broker>, stream: TcpStream, peer: std::net::SocketAddr) {
    let Some(tls) = broker.security.metrics_tls() else {
        return serve_connection(broker, stream, peer).await;
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.server_config());
    match tokio::time::timeout(HEAD_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => serve_connection(broker, stream, peer).await,
        Ok(Err(e)) => {
            tracing::debug!(%peer, "metrics.listen: TLS handshake failed ({e}); is the client using https://?")
        }
        Err(_) => {}
    }
}

/// Why a request head could not be used.
#[derive(Debug, PartialEq, Eq)]
enum BadRequest {
    TooLarge,
    Malformed,
}

async fn serve_connection<S: AsyncRead + AsyncWrite + Unpin>(
    broker: &Arc<Broker>,
    mut stream: S,
    peer: std::net::SocketAddr,
) {
    let mut buf = Vec::with_capacity(1024);
    let head = tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut stream, &mut buf)).await;
    let response = match head {
        Err(_) | Ok(Err(_)) => return, // too slow, or gone: nothing to answer
        Ok(Ok(Err(BadRequest::TooLarge))) => Response::text(431, "request head too large\n"),
        Ok(Ok(Err(BadRequest::Malformed))) => Response::text(400, "malformed HTTP request\n"),
        Ok(Ok(Ok(end))) => match parse_head(&buf[..end]) {
            Ok(head) => match authenticate(broker, &head, peer).await {
                Ok(()) => route(broker, head).await,
                Err(refusal) => refusal,
            },
            Err(_) => Response::text(400, "malformed HTTP request\n"),
        },
    };
    let write = async {
        stream.write_all(&response.head()).await?;
        stream.write_all(&response.body).await?;
        stream.shutdown().await
    };
    let _ = tokio::time::timeout(WRITE_TIMEOUT, write).await;
}

/// Reads until the blank line that ends the head; returns where it ends in `buf`.
async fn read_head<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut Vec<u8>,
) -> std::io::Result<Result<usize, BadRequest>> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = find_head_end(buf) {
            return Ok(Ok(end));
        }
        if buf.len() >= MAX_HEAD_BYTES {
            return Ok(Err(BadRequest::TooLarge));
        }
        let room = (MAX_HEAD_BYTES - buf.len()).min(chunk.len());
        let n = stream.read(&mut chunk[..room]).await?;
        if n == 0 {
            return Ok(Err(BadRequest::Malformed));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

fn parse_head(head: &[u8]) -> Result<Head<'_>, BadRequest> {
    let text = std::str::from_utf8(head).map_err(|_| BadRequest::Malformed)?;
    let line = text.split("\r\n").next().ok_or(BadRequest::Malformed)?;
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(BadRequest::Malformed);
    };
    if !version.starts_with("HTTP/1.") || !target.starts_with('/') {
        return Err(BadRequest::Malformed);
    }
    let path = target.split(['?', '#']).next().unwrap_or(target);
    let authorization = text.split("\r\n").skip(1).find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim().eq_ignore_ascii_case("authorization").then(|| value.trim())
    });
    Ok(Head {
        method,
        path,
        authorization,
    })
}

/// With `metrics.authentication=scram`: the request must carry HTTP Basic credentials of a SCRAM
/// user (401 otherwise), who needs DESCRIBE on the cluster when an authorizer is on (403).
async fn authenticate(broker: &Arc<Broker>, head: &Head<'_>, peer: std::net::SocketAddr) -> Result<(), Response> {
    let security = &broker.security;
    if security.settings.metrics_authentication == MetricsAuthentication::None {
        return Ok(());
    }
    let unauthorized = || {
        let mut r = Response::text(
            401,
            "credentials needed: HTTP Basic with a SCRAM user's name and password\n",
        );
        r.challenge = true;
        r
    };
    let Some((user, password)) = head.authorization.and_then(basic_credentials) else {
        return Err(unauthorized());
    };
    let image = broker.metadata.image();
    if !security.check_http_login(image.clone(), &user, &password).await {
        tracing::info!(%peer, user = %user, "metrics.listen: wrong HTTP credentials");
        return Err(unauthorized());
    }
    let principal = format!("User:{user}");
    let host = peer.ip().to_string();
    let who = crate::security::authorizer::Requester {
        principal: &principal,
        host: &host,
    };
    if !security.authorizer.authorize(
        &image.acls,
        who,
        AclOperation::Describe,
        ResourceType::Cluster,
        CLUSTER_NAME,
    ) {
        return Err(Response::text(
            403,
            "this user may not read the cluster's metrics: it needs DESCRIBE on the cluster\n",
        ));
    }
    Ok(())
}

/// `Basic base64(user:password)`.
fn basic_credentials(value: &str) -> Option<(String, String)> {
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded.trim()).ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

async fn route(broker: &Arc<Broker>, head: Head<'_>) -> Response {
    if head.method != "GET" {
        return Response::text(405, "only GET is served here: this server is read-only\n");
    }
    match head.path {
        "/metrics" => Response::new(200, exposition::CONTENT_TYPE, exposition::render(broker).into_bytes()),
        "/" | "/index.html" => Response::new(200, "text/html; charset=utf-8", CONSOLE_PAGE.as_bytes().to_vec()),
        "/api/cluster" => Response::json(&console::cluster(broker).await),
        "/api/history" => Response::json(&console::history(broker).await),
        "/api/local" => Response::json(&console::local(broker)),
        _ => Response::text(
            404,
            "not found: try /metrics, / (the console), /api/cluster or /api/history\n",
        ),
    }
}

struct Response {
    status: u16,
    content_type: &'static str,
    body: Vec<u8>,
    /// Ask for HTTP Basic credentials (`WWW-Authenticate`, with a 401).
    challenge: bool,
}

impl Response {
    fn new(status: u16, content_type: &'static str, body: Vec<u8>) -> Response {
        Response {
            status,
            content_type,
            body,
            challenge: false,
        }
    }

    fn text(status: u16, body: &str) -> Response {
        Response::new(status, "text/plain; charset=utf-8", body.as_bytes().to_vec())
    }

    fn json(value: &impl serde::Serialize) -> Response {
        match serde_json::to_vec(value) {
            Ok(body) => Response::new(200, "application/json", body),
            Err(e) => Response::text(500, &format!("cannot encode the answer: {e}\n")),
        }
    }

    fn head(&self) -> Vec<u8> {
        let reason = match self.status {
            200 => "OK",
            400 => "Bad Request",
            401 => "Unauthorized",
            403 => "Forbidden",
            404 => "Not Found",
            405 => "Method Not Allowed",
            431 => "Request Header Fields Too Large",
            _ => "Internal Server Error",
        };
        let allow = if self.status == 405 { "Allow: GET\r\n" } else { "" };
        let allow = if self.challenge {
            "WWW-Authenticate: Basic realm=\"sluice\", charset=\"UTF-8\"\r\n"
        } else {
            allow
        };
        format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n{allow}Connection: close\r\n\r\n",
            self.status,
            self.content_type,
            self.body.len()
        )
        .into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_line_gives_method_and_path_without_the_query() {
        let head = parse_head(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nauthorization: Basic YTpi\r\n\r\n").unwrap();
        assert_eq!(
            head,
            Head {
                method: "GET",
                path: "/metrics",
                authorization: Some("Basic YTpi"),
            }
        );
        assert_eq!(basic_credentials("Basic YTpi"), Some(("a".into(), "b".into())));
        assert_eq!(basic_credentials("Bearer YTpi"), None);
        assert_eq!(basic_credentials("Basic !!"), None);
        assert_eq!(parse_head(b"GET metrics HTTP/1.1\r\n\r\n"), Err(BadRequest::Malformed));
        assert_eq!(parse_head(b"GET / SPDY/3\r\n\r\n"), Err(BadRequest::Malformed));
        assert_eq!(parse_head(b"GET / HTTP/1.1 extra\r\n\r\n"), Err(BadRequest::Malformed));
        assert_eq!(parse_head(b"\xff\xfe / HTTP/1.1\r\n\r\n"), Err(BadRequest::Malformed));
    }

    #[test]
    fn the_head_ends_at_the_first_blank_line() {
        assert_eq!(find_head_end(b"GET / HTTP/1.1\r\n\r\nbody"), Some(18));
        assert_eq!(find_head_end(b"GET / HTTP/1.1\r\n"), None);
    }

    #[test]
    fn the_console_page_loads_nothing_from_elsewhere() {
        let lower = CONSOLE_PAGE
            .to_ascii_lowercase()
            .replace([' ', '\''], "")
            .replace('"', "");
        for external in [
            "src=http",
            "src=//",
            "href=http",
            "href=//",
            "url(http",
            "url(//",
            "@import",
            "fetch(http",
        ] {
            assert!(
                !lower.contains(external),
                "the console page loads something from elsewhere ({external})"
            );
        }
    }
}
