//! How the harness reaches a secured listener: TLS through rustls (trusting a test CA, with a
//! client certificate when the listener asks for one) and SASL (PLAIN, SCRAM-SHA-256/512) through
//! hand-encoded SaslHandshake v1 + SaslAuthenticate v2 ([`crate::wire`]), as Kafka's Java client
//! logs in. The readiness probe ([`crate::node`]) and the harness's own typed requests
//! ([`crate::kafka_client`], [`crate::Cluster`]) connect this way; rdkafka gets the same settings
//! from [`crate::clients::secured`].
//!
//! The SCRAM client is written from RFC 5802 here, not taken from the broker: the tests must not
//! share a codec with what they test.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use hmac::{Hmac, Mac};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use sha2::{Digest, Sha256, Sha512};

use crate::wire;

/// How a client connects: plaintext when both parts are `None` (every existing test).
#[derive(Debug, Clone, Default)]
pub struct ClientSecurity {
    pub tls: Option<TlsClient>,
    pub sasl: Option<SaslLogin>,
}

/// TLS as a client: the CA to trust, and a certificate to present when the listener has
/// `ssl.client.auth=required|requested`.
#[derive(Debug, Clone)]
pub struct TlsClient {
    /// PEM file of the CA certificate(s) the broker's certificate must chain to.
    pub ca_pem: PathBuf,
    /// PEM files of the client certificate (chain) and its private key.
    pub identity: Option<(PathBuf, PathBuf)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslMechanism {
    Plain,
    ScramSha256,
    ScramSha512,
}

impl SaslMechanism {
    /// The name Kafka and librdkafka use (`sasl.mechanism(s)`).
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// A SASL user and how it logs in.
#[derive(Debug, Clone)]
pub struct SaslLogin {
    pub mechanism: SaslMechanism,
    pub username: String,
    pub password: String,
}

impl SaslLogin {
    pub fn new(mechanism: SaslMechanism, username: &str, password: &str) -> SaslLogin {
        SaslLogin {
            mechanism,
            username: username.to_string(),
            password: password.to_string(),
        }
    }
}

impl ClientSecurity {
    pub fn tls(mut self, tls: TlsClient) -> Self {
        self.tls = Some(tls);
        self
    }
    pub fn sasl(mut self, login: SaslLogin) -> Self {
        self.sasl = Some(login);
        self
    }

    /// Kafka's `security.protocol` for this combination.
    pub fn protocol(&self) -> &'static str {
        match (&self.tls, &self.sasl) {
            (None, None) => "PLAINTEXT",
            (Some(_), None) => "SSL",
            (None, Some(_)) => "SASL_PLAINTEXT",
            (Some(_), Some(_)) => "SASL_SSL",
        }
    }

    /// Connects to `addr` (read/write timeouts `io_timeout`), completes the TLS handshake and
    /// logs in, so the stream is ready for any request.
    pub fn connect(&self, addr: SocketAddr, io_timeout: Duration) -> Result<KafkaStream> {
        self.secure(wire::connect(addr, io_timeout)?, addr)
    }

    /// Completes the TLS handshake and the login on `tcp`, connected to `addr`.
    pub fn secure(&self, tcp: TcpStream, addr: SocketAddr) -> Result<KafkaStream> {
        let mut stream = match &self.tls {
            None => KafkaStream::Plain(tcp),
            Some(tls) => KafkaStream::Tls(Box::new(tls_handshake(tls, addr, tcp)?)),
        };
        if let Some(login) = &self.sasl {
            sasl_login(&mut stream, login)
                .with_context(|| format!("SASL {} login to {addr}", login.mechanism.name()))?;
        }
        Ok(stream)
    }
}

/// A connection to a broker: TCP, or TLS over TCP.
pub enum KafkaStream {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl KafkaStream {
    /// The TCP socket underneath (for timeouts).
    pub fn tcp(&self) -> &TcpStream {
        match self {
            KafkaStream::Plain(s) => s,
            KafkaStream::Tls(s) => &s.sock,
        }
    }
}

impl Drop for KafkaStream {
    /// Ends a TLS session with close_notify, as clients do (a bare close reads to the broker as
    /// a truncated session).
    fn drop(&mut self) {
        if let KafkaStream::Tls(s) = self {
            s.conn.send_close_notify();
            let _ = s.conn.complete_io(&mut s.sock);
        }
    }
}

impl Read for KafkaStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            KafkaStream::Plain(s) => s.read(buf),
            KafkaStream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for KafkaStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            KafkaStream::Plain(s) => s.write(buf),
            KafkaStream::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            KafkaStream::Plain(s) => s.flush(),
            KafkaStream::Tls(s) => s.flush(),
        }
    }
}

/// A rustls client configuration for `tls` (ring as the crypto provider, as the broker uses).
pub fn tls_client_config(tls: &TlsClient) -> Result<Arc<ClientConfig>> {
    let mut roots = RootCertStore::empty();
    for cert in read_certificates(&tls.ca_pem)? {
        roots
            .add(cert)
            .with_context(|| format!("CA certificate in {}", tls.ca_pem.display()))?;
    }
    let builder = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    let config = match &tls.identity {
        None => builder.with_no_client_auth(),
        Some((chain, key)) => {
            let key = PrivateKeyDer::from_pem_file(key).with_context(|| format!("private key in {}", key.display()))?;
            builder.with_client_auth_cert(read_certificates(chain)?, key)?
        }
    };
    Ok(Arc::new(config))
}

fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .with_context(|| format!("reading {}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("certificates in {}", path.display()))?;
    ensure!(!certs.is_empty(), "no certificate in {}", path.display());
    Ok(certs)
}

/// The TLS handshake on `tcp`, checking that the broker's certificate names `addr`'s IP address.
fn tls_handshake(
    tls: &TlsClient,
    addr: SocketAddr,
    tcp: TcpStream,
) -> Result<StreamOwned<ClientConnection, TcpStream>> {
    let config = tls_client_config(tls)?;
    let connection = ClientConnection::new(config, ServerName::IpAddress(addr.ip().into()))?;
    let mut stream = StreamOwned::new(connection, tcp);
    while stream.conn.is_handshaking() {
        stream
            .conn
            .complete_io(&mut stream.sock)
            .with_context(|| format!("TLS handshake with {addr}"))?;
    }
    Ok(stream)
}

/// The certificate `addr` presents in a TLS handshake (the leaf, first of its chain), checked
/// as any connection checks it (chains to the CA, names `addr`'s IP address).
pub fn served_certificate(tls: &TlsClient, addr: SocketAddr, io_timeout: Duration) -> Result<CertificateDer<'static>> {
    let stream = tls_handshake(tls, addr, wire::connect(addr, io_timeout)?)?;
    let leaf = stream
        .conn
        .peer_certificates()
        .and_then(|chain| chain.first())
        .with_context(|| format!("{addr} presented no certificate"))?
        .clone()
        .into_owned();
    Ok(leaf)
}

/// The first certificate in the PEM file `path` (a keystore's leaf).
pub fn first_certificate(path: &Path) -> Result<CertificateDer<'static>> {
    Ok(read_certificates(path)?.swap_remove(0))
}

/// Logs in on `stream` as Kafka's Java client does: SaslHandshake v1, then the mechanism's
/// tokens in SaslAuthenticate v2 requests. Fails with the broker's error code and message.
pub fn sasl_login<S: Read + Write>(stream: &mut S, login: &SaslLogin) -> Result<()> {
    sasl_login_reporting_iterations(stream, login).map(|_| ())
}

/// [`sasl_login`], returning the iteration count a SCRAM server-first named (`None` for
/// PLAIN): which of a user's credentials the broker holds (a credential changes salt and
/// iterations together).
pub fn sasl_login_reporting_iterations<S: Read + Write>(stream: &mut S, login: &SaslLogin) -> Result<Option<u32>> {
    let handshake = wire::sasl_handshake(stream, 1, login.mechanism.name(), 1_000)?;
    ensure!(
        handshake.error_code == wire::ERROR_NONE,
        "SaslHandshake for {} answered error code {} (enabled: {:?})",
        login.mechanism.name(),
        handshake.error_code,
        handshake.mechanisms
    );
    let mut correlation_id = 1_000;
    let mut authenticate = |token: &[u8]| -> Result<Vec<u8>> {
        correlation_id += 1;
        let reply = wire::sasl_authenticate(stream, 2, token, correlation_id)?;
        ensure!(
            reply.error_code == wire::ERROR_NONE,
            "SaslAuthenticate answered error code {}: {:?}",
            reply.error_code,
            reply.error_message
        );
        Ok(reply.auth_bytes)
    };
    match login.mechanism {
        SaslMechanism::Plain => {
            authenticate(&wire::sasl_plain_message(&login.username, &login.password))?;
            Ok(None)
        }
        SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512 => {
            let mut scram = ScramClient::new(login.mechanism, &login.username, &login.password)?;
            let server_first = authenticate(scram.first_message().as_bytes())?;
            let client_final = scram.final_message(&server_first)?;
            let server_final = authenticate(client_final.as_bytes())?;
            scram.verify_server_final(&server_final)?;
            Ok(scram.iterations)
        }
    }
}

/// SCRAM's SaltedPassword (RFC 5802: PBKDF2 of the password with the salt), what
/// AlterUserScramCredentials carries instead of the password, as Kafka's admin client sends it.
pub fn salted_password(mechanism: SaslMechanism, password: &str, salt: &[u8], iterations: u32) -> Vec<u8> {
    match mechanism {
        SaslMechanism::ScramSha256 => {
            let mut out = [0u8; 32];
            pbkdf2::pbkdf2_hmac::<Sha256>(password.as_bytes(), salt, iterations, &mut out);
            out.to_vec()
        }
        _ => {
            let mut out = [0u8; 64];
            pbkdf2::pbkdf2_hmac::<Sha512>(password.as_bytes(), salt, iterations, &mut out);
            out.to_vec()
        }
    }
}

/// The client side of one SCRAM exchange (RFC 5802, RFC 7677), without channel binding.
pub struct ScramClient {
    hash: SaslMechanism,
    password: String,
    client_first_bare: String,
    client_nonce: String,
    /// Set by [`Self::final_message`]: the server signature the last message must carry.
    expected_server_signature: Option<Vec<u8>>,
    /// The iteration count the server-first message named.
    iterations: Option<u32>,
}

impl ScramClient {
    pub fn new(mechanism: SaslMechanism, user: &str, password: &str) -> Result<ScramClient> {
        ensure!(mechanism != SaslMechanism::Plain, "PLAIN is not SCRAM");
        let client_nonce = random_nonce();
        let name = user.replace('=', "=3D").replace(',', "=2C");
        Ok(ScramClient {
            hash: mechanism,
            password: password.to_string(),
            client_first_bare: format!("n={name},r={client_nonce}"),
            client_nonce,
            expected_server_signature: None,
            iterations: None,
        })
    }

    /// `n,,n=user,r=nonce`.
    pub fn first_message(&self) -> String {
        format!("n,,{}", self.client_first_bare)
    }

    /// The client-final message answering `server_first` (`r=...,s=...,i=...`).
    pub fn final_message(&mut self, server_first: &[u8]) -> Result<String> {
        let (without_proof, proof) = self.proof(server_first)?;
        Ok(format!("{without_proof},p={}", BASE64.encode(proof)))
    }

    /// The client-final message with `proof` in place of the real one: a forged proof, which a
    /// test sends to see the broker refuse it.
    pub fn forged_final_message(&mut self, server_first: &[u8], proof: &[u8]) -> Result<String> {
        let (without_proof, _) = self.proof(server_first)?;
        Ok(format!("{without_proof},p={}", BASE64.encode(proof)))
    }

    /// The message without its proof, and the proof.
    fn proof(&mut self, server_first: &[u8]) -> Result<(String, Vec<u8>)> {
        let server_first = std::str::from_utf8(server_first).context("server-first message is not UTF-8")?;
        let mut nonce = None;
        let mut salt = None;
        let mut iterations = None;
        for field in server_first.split(',') {
            match field.split_once('=') {
                Some(("r", v)) => nonce = Some(v.to_string()),
                Some(("s", v)) => salt = Some(BASE64.decode(v).context("salt is not base64")?),
                Some(("i", v)) => iterations = Some(v.parse::<u32>().context("iteration count")?),
                _ => {}
            }
        }
        let (Some(nonce), Some(salt), Some(iterations)) = (nonce, salt, iterations) else {
            bail!("server-first message {server_first:?} lacks r, s or i");
        };
        ensure!(
            nonce.starts_with(&self.client_nonce) && nonce.len() > self.client_nonce.len(),
            "server nonce {nonce:?} does not extend ours"
        );
        ensure!(
            (4096..=1_000_000).contains(&iterations),
            "implausible iteration count {iterations}"
        );
        self.iterations = Some(iterations);
        let salted = salted_password(self.hash, &self.password, &salt, iterations);
        let client_key = self.hmac(&salted, b"Client Key");
        let stored_key = self.digest(&client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let client_signature = self.hmac(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&client_signature).map(|(k, s)| k ^ s).collect();
        let server_key = self.hmac(&salted, b"Server Key");
        self.expected_server_signature = Some(self.hmac(&server_key, auth_message.as_bytes()));
        Ok((without_proof, proof))
    }

    /// Checks the server's last message (`v=signature`): the server knew our credential.
    pub fn verify_server_final(&self, server_final: &[u8]) -> Result<()> {
        let expected = self
            .expected_server_signature
            .as_ref()
            .context("server-final before client-final")?;
        let text = std::str::from_utf8(server_final).context("server-final message is not UTF-8")?;
        let signature = text
            .strip_prefix("v=")
            .with_context(|| format!("server-final message {text:?} has no v="))?;
        ensure!(
            BASE64.decode(signature).ok().as_ref() == Some(expected),
            "the server signature does not match: the server does not hold our credential"
        );
        Ok(())
    }

    fn hmac(&self, key: &[u8], message: &[u8]) -> Vec<u8> {
        match self.hash {
            SaslMechanism::ScramSha256 => {
                let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
                mac.update(message);
                mac.finalize().into_bytes().to_vec()
            }
            _ => {
                let mut mac = Hmac::<Sha512>::new_from_slice(key).expect("HMAC takes keys of any length");
                mac.update(message);
                mac.finalize().into_bytes().to_vec()
            }
        }
    }

    fn digest(&self, bytes: &[u8]) -> Vec<u8> {
        match self.hash {
            SaslMechanism::ScramSha256 => Sha256::digest(bytes).to_vec(),
            _ => Sha512::digest(bytes).to_vec(),
        }
    }
}

/// 32 printable characters from the OS's randomness (std's hasher keys).
fn random_nonce() -> String {
    use std::hash::{BuildHasher, Hasher};
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    (0..4)
        .flat_map(|i| {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u32(i);
            h.finish().to_le_bytes()
        })
        .map(|b| ALPHABET[b as usize % ALPHABET.len()] as char)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677's SCRAM-SHA-256 example (user "user", password "pencil").
    #[test]
    fn scram_sha_256_matches_the_rfc_7677_example() {
        let mut client = ScramClient::new(SaslMechanism::ScramSha256, "user", "pencil").unwrap();
        client.client_nonce = "rOprNGfwEbeRWgbNEkqO".into();
        client.client_first_bare = "n=user,r=rOprNGfwEbeRWgbNEkqO".into();
        let server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let last = client.final_message(server_first).unwrap();
        assert_eq!(
            last,
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        client
            .verify_server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .unwrap();
        assert!(client.verify_server_final(b"v=AAAA").is_err());
    }

    #[test]
    fn nonces_differ() {
        assert_ne!(random_nonce(), random_nonce());
        assert_eq!(random_nonce().len(), 32);
    }
}
