//! A small Kafka admin client for what the rdkafka crate cannot do: create ACLs.
//!
//! One blocking connection to one broker, speaking the wire protocol with the `kafka-protocol`
//! codecs the broker itself uses:
//!
//! 1. TCP, then TLS when `security.protocol` is SSL or SASL_SSL (rustls with ring; the broker's
//!    certificate must chain to the CA in `ssl.ca.location` and name the host dialled, as
//!    librdkafka checks it by default);
//! 2. for SASL_*: SaslHandshake, then SaslAuthenticate rounds as `sasl.username`, with
//!    SCRAM-SHA-512 ([`crate::scram`], whose last step checks the broker's signature) or PLAIN;
//! 3. requests framed as Kafka frames them (a size, a request header, the body), one at a
//!    time, each answer matched by its correlation id.
//!
//! The settings are the same [`ClientSecurity`] properties the rdkafka clients get, so one
//! `--security-config` file serves both.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::error::ParseResponseErrorCode;
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::{
    CreateAclsRequest, RequestHeader, ResponseHeader, SaslAuthenticateRequest, SaslHandshakeRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

use crate::scram::{self, ScramClient};
use crate::security::ClientSecurity;

/// Connecting, and each request's answer, must take at most this long.
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read; the demo's requests have small answers.
const MAX_RESPONSE_BYTES: usize = 1024 * 1024;
/// Request versions sent (all supported by Kafka 3.x and Sluice).
const SASL_HANDSHAKE_VERSION: i16 = 1;
const SASL_AUTHENTICATE_VERSION: i16 = 2;
const CREATE_ACLS_VERSION: i16 = 3;

/// Kafka's codes for an ACL binding (org.apache.kafka.common.acl and .resource).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceType {
    Topic = 2,
    Group = 3,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Read = 3,
    Write = 4,
    Create = 5,
    Describe = 8,
}

const PATTERN_LITERAL: i8 = 3;
const PERMISSION_ALLOW: i8 = 3;
const ANY_HOST: &str = "*";

/// One ALLOW binding on a LITERAL resource name, from any host: the only kind the demo makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acl {
    /// `User:<name>`.
    pub principal: String,
    pub operation: Operation,
    pub resource_type: ResourceType,
    pub resource_name: String,
}

impl std::fmt::Display for Acl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ALLOW {} {:?} on {:?}:LITERAL:{}",
            self.principal, self.operation, self.resource_type, self.resource_name
        )
    }
}

/// The socket, with or without TLS.
enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// A logged-in connection to one broker.
pub struct AdminConnection {
    stream: Stream,
    correlation_id: i32,
    client_id: StrBytes,
}

impl Drop for AdminConnection {
    /// Ends TLS with close_notify, so the broker sees an orderly close, not a truncation.
    fn drop(&mut self) {
        if let Stream::Tls(s) = &mut self.stream {
            s.conn.send_close_notify();
            let _ = s.flush();
        }
    }
}

/// Connects to the first broker of `bootstrap` (`host:port,...`) that accepts the login.
pub fn connect_any(bootstrap: &str, security: &ClientSecurity) -> Result<AdminConnection> {
    let mut failures = Vec::new();
    for address in bootstrap.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        match AdminConnection::connect(address, security) {
            Ok(connection) => return Ok(connection),
            Err(e) => failures.push(format!("{address}: {e:#}")),
        }
    }
    bail!(
        "no broker of {bootstrap} took the admin connection: {}",
        failures.join("; ")
    )
}

impl AdminConnection {
    /// Connects to `address` (`host:port`) and logs in as `security` says.
    pub fn connect(address: &str, security: &ClientSecurity) -> Result<AdminConnection> {
        let (host, _) = address
            .rsplit_once(':')
            .with_context(|| format!("{address} is not host:port"))?;
        let socket_address = address
            .to_socket_addrs()
            .with_context(|| format!("cannot resolve {address}"))?
            .next()
            .with_context(|| format!("{address} resolves to no address"))?;
        let tcp = TcpStream::connect_timeout(&socket_address, IO_TIMEOUT)
            .with_context(|| format!("cannot connect to {address}"))?;
        tcp.set_read_timeout(Some(IO_TIMEOUT))?;
        tcp.set_write_timeout(Some(IO_TIMEOUT))?;
        tcp.set_nodelay(true)?;
        let protocol = security.protocol();
        let stream = match protocol.as_str() {
            "PLAINTEXT" | "SASL_PLAINTEXT" => Stream::Plain(tcp),
            "SSL" | "SASL_SSL" => Stream::Tls(Box::new(tls(tcp, host, security)?)),
            other => bail!("security.protocol={other} is not PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"),
        };
        let mut connection = AdminConnection {
            stream,
            correlation_id: 0,
            client_id: StrBytes::from_static_str("sluice-demo-admin"),
        };
        if protocol.starts_with("SASL_") {
            connection
                .login(security)
                .with_context(|| format!("SASL login at {address}"))?;
        }
        Ok(connection)
    }

    /// SaslHandshake, then the mechanism's SaslAuthenticate rounds.
    fn login(&mut self, security: &ClientSecurity) -> Result<()> {
        let mechanism = security.get("sasl.mechanisms").unwrap_or("PLAIN").to_ascii_uppercase();
        let username = security.get("sasl.username").context("sasl.username is not set")?;
        let password = security.get("sasl.password").context("sasl.password is not set")?;
        let handshake = self.call(
            &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_string(mechanism.clone())),
            SASL_HANDSHAKE_VERSION,
        )?;
        if handshake.error_code != 0 {
            let enabled: Vec<&str> = handshake.mechanisms.iter().map(|m| m.as_str()).collect();
            bail!("the broker does not take {mechanism}; it takes {enabled:?} (sasl.enabled.mechanisms)");
        }
        match mechanism.as_str() {
            scram::MECHANISM => {
                let mut client = ScramClient::new(username, password);
                let server_first = self.authenticate(client.client_first(), username)?;
                let client_final = client.client_final(&server_first)?;
                let server_final = self.authenticate(client_final, username)?;
                client.verify_server_final(&server_final)
            }
            "PLAIN" => {
                // RFC 4616: authorization id (empty), user, password, NUL-separated. Only over TLS.
                let token = format!("\0{username}\0{password}");
                self.authenticate(token.into_bytes(), username).map(drop)
            }
            other => bail!("sasl.mechanisms={other}: this client speaks SCRAM-SHA-512 and PLAIN"),
        }
    }

    /// One SaslAuthenticate round; the server's bytes.
    fn authenticate(&mut self, auth_bytes: Vec<u8>, username: &str) -> Result<Bytes> {
        let response = self.call(
            &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(auth_bytes)),
            SASL_AUTHENTICATE_VERSION,
        )?;
        if response.error_code != 0 {
            bail!(
                "the broker refused the login as {username}: {:?} {}",
                response.error_code.err(),
                response.error_message.as_deref().unwrap_or("")
            );
        }
        Ok(response.auth_bytes)
    }

    /// Sends one request at `version` and decodes its answer.
    pub fn call<R: Request>(&mut self, request: &R, version: i16) -> Result<R::Response> {
        self.correlation_id += 1;
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(self.client_id.clone()));
        let mut frame = BytesMut::new();
        frame.put_i32(0);
        header.encode(&mut frame, R::header_version(version))?;
        request.encode(&mut frame, version)?;
        let size = i32::try_from(frame.len() - 4).context("request too large")?;
        frame[..4].copy_from_slice(&size.to_be_bytes());
        self.stream.write_all(&frame).context("cannot send the request")?;
        self.stream.flush()?;
        let mut size = [0u8; 4];
        self.stream
            .read_exact(&mut size)
            .context("the broker closed the connection or did not answer")?;
        let size = usize::try_from(i32::from_be_bytes(size)).context("negative response size")?;
        ensure!(
            size <= MAX_RESPONSE_BYTES,
            "a {size}-byte answer is larger than {MAX_RESPONSE_BYTES}"
        );
        let mut body = vec![0u8; size];
        self.stream.read_exact(&mut body).context("cannot read the answer")?;
        let mut body = Bytes::from(body);
        let header = ResponseHeader::decode(&mut body, R::Response::header_version(version))?;
        ensure!(
            header.correlation_id == self.correlation_id,
            "the answer's correlation id {} is not the request's {}",
            header.correlation_id,
            self.correlation_id
        );
        let response = R::Response::decode(&mut body, version)?;
        ensure!(!body.has_remaining(), "{} bytes after the answer", body.remaining());
        Ok(response)
    }

    /// CreateAcls for every binding; fails naming each one the broker refused. A binding that
    /// exists already is not an error (the broker keeps one copy), so this may be repeated.
    pub fn create_acls(&mut self, acls: &[Acl]) -> Result<()> {
        let creations = acls
            .iter()
            .map(|acl| {
                AclCreation::default()
                    .with_resource_type(acl.resource_type as i8)
                    .with_resource_name(StrBytes::from_string(acl.resource_name.clone()))
                    .with_resource_pattern_type(PATTERN_LITERAL)
                    .with_principal(StrBytes::from_string(acl.principal.clone()))
                    .with_host(StrBytes::from_static_str(ANY_HOST))
                    .with_operation(acl.operation as i8)
                    .with_permission_type(PERMISSION_ALLOW)
            })
            .collect();
        let response = self.call(
            &CreateAclsRequest::default().with_creations(creations),
            CREATE_ACLS_VERSION,
        )?;
        ensure!(
            response.results.len() == acls.len(),
            "{} results for {} ACLs",
            response.results.len(),
            acls.len()
        );
        let reason = |r: &AclCreationResult| {
            let code = r
                .error_code
                .err()
                .map_or_else(|| r.error_code.to_string(), |e| format!("{e:?}"));
            format!("{code}: {}", r.error_message.as_deref().unwrap_or(""))
        };
        let refused: Vec<(&Acl, String)> = acls
            .iter()
            .zip(&response.results)
            .filter(|(_, r)| r.error_code != 0)
            .map(|(acl, r)| (acl, reason(r)))
            .collect();
        match refused.as_slice() {
            [] => Ok(()),
            // One reason for all (not allowed to change ACLs, no authorizer): say it once.
            [(_, first), ..] if refused.len() == acls.len() && refused.iter().all(|(_, r)| r == first) => {
                bail!("the broker refused all {} ACLs: {first}", acls.len())
            }
            _ => {
                let each: Vec<String> = refused.iter().map(|(acl, r)| format!("{acl}: {r}")).collect();
                bail!(
                    "the broker refused {} of {} ACLs: {}",
                    refused.len(),
                    acls.len(),
                    each.join("; ")
                )
            }
        }
    }
}

/// Connects and logs in, retrying for up to `timeout` (the users are created by the brokers
/// shortly after they start, so the first logins of a new cluster may be refused).
pub fn connect_retrying(bootstrap: &str, security: &ClientSecurity, timeout: Duration) -> Result<AdminConnection> {
    let deadline = Instant::now() + timeout;
    loop {
        match connect_any(bootstrap, security) {
            Ok(connection) => return Ok(connection),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(e) => {
                tracing::debug!("admin connection not possible yet: {e:#}");
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    }
}

/// TLS over `tcp`, trusting the CA in `ssl.ca.location` and checking that the broker's
/// certificate names `host`.
fn tls(
    tcp: TcpStream,
    host: &str,
    security: &ClientSecurity,
) -> Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>> {
    let ca = security
        .get("ssl.ca.location")
        .context("TLS needs ssl.ca.location, the CA certificate (PEM) the brokers' certificates chain to")?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).with_context(|| format!("cannot read ssl.ca.location {ca}"))? {
        roots
            .add(cert.with_context(|| format!("{ca} is not a PEM certificate"))?)
            .with_context(|| format!("{ca} holds a certificate rustls cannot use"))?;
    }
    ensure!(!roots.is_empty(), "ssl.ca.location {ca} holds no certificate");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from(host.trim_start_matches('[').trim_end_matches(']').to_string())
        .with_context(|| format!("{host} is not a host name or address"))?;
    let mut connection = rustls::ClientConnection::new(Arc::new(config), name)?;
    let mut tcp = tcp;
    // Handshake now, so a certificate problem is reported as one, not as a failed request.
    while connection.is_handshaking() {
        connection
            .complete_io(&mut tcp)
            .with_context(|| format!("TLS handshake with {host} (trusting {ca})"))?;
    }
    Ok(rustls::StreamOwned::new(connection, tcp))
}
