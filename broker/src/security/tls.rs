//! TLS with rustls, configured by Kafka's `ssl.*` settings: the server side of a listener
//! (certificate chain and key from PEM or PKCS12, client certificates checked against the
//! truststore when `ssl.client.auth` asks for them, `ssl.enabled.protocols`,
//! `ssl.cipher.suites`) and the client side a broker uses to reach another broker's listener
//! (the same truststore, the same certificate for mutual TLS, the host name checked unless
//! `ssl.endpoint.identification.algorithm` is empty).
//!
//! [`TlsListener`] holds the configuration in force and re-reads the files every
//! `ssl.reload.check.interval.ms`: when their bytes change, a new configuration is built and
//! used for connections accepted from then on; established connections keep theirs. A file
//! that does not load is logged and the old configuration kept.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};

use crate::config::principal_rules::{self, Rule};
use crate::config::security::{ClientAuth, StoreType, TlsSettings, TlsVersion, JKS_REFUSAL};

/// The first bytes of a JKS store.
const JKS_MAGIC: [u8; 4] = [0xFE, 0xED, 0xFE, 0xED];
/// A key or store file larger than this is not one.
const MAX_STORE_FILE_BYTES: u64 = 1 << 20;

/// Why TLS could not be set up; the message says which setting and what to do.
#[derive(Debug, thiserror::Error)]
#[error("listener {listener}: {message}")]
pub struct TlsError {
    pub listener: String,
    pub message: String,
}

/// One TLS listener's configuration in force: what new connections are accepted with, the
/// client configuration for dialling other brokers, and the principal mapping rules.
pub struct TlsListener {
    pub listener: String,
    settings: TlsSettings,
    current: RwLock<Loaded>,
    pub principal_rules: Vec<Rule>,
}

struct Loaded {
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
    /// The bytes of every file the configuration was built from, to notice changes.
    files: Vec<(PathBuf, Vec<u8>)>,
}

impl TlsListener {
    /// Reads the certificate files and builds the configuration; errors are start-up errors.
    pub fn load(listener: &str, settings: &TlsSettings) -> Result<TlsListener, TlsError> {
        let err = |message: String| TlsError {
            listener: listener.to_string(),
            message,
        };
        let loaded = build(settings).map_err(err)?;
        let principal_rules = principal_rules::parse(&settings.principal_mapping_rules).map_err(|e| TlsError {
            listener: listener.to_string(),
            message: format!("ssl.principal.mapping.rules: {e}"),
        })?;
        Ok(TlsListener {
            listener: listener.to_string(),
            settings: settings.clone(),
            current: RwLock::new(loaded),
            principal_rules,
        })
    }

    /// The server configuration new connections are accepted with.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.current.read().server.clone()
    }

    /// The client configuration for dialling another broker's listener of this name.
    pub fn client_config(&self) -> Arc<ClientConfig> {
        self.current.read().client.clone()
    }

    /// Re-reads the files; if any changed, builds and installs a new configuration. Returns
    /// whether it did. A change that does not load is logged and the old configuration kept.
    pub fn reload_if_changed(&self) -> bool {
        let changed = {
            let current = self.current.read();
            current
                .files
                .iter()
                .any(|(path, bytes)| read_limited(path).ok().as_deref() != Some(bytes.as_slice()))
        };
        if !changed {
            return false;
        }
        match build(&self.settings) {
            Ok(loaded) => {
                *self.current.write() = loaded;
                tracing::info!(listener = %self.listener, "certificate files changed: new TLS connections use the new certificates");
                true
            }
            Err(message) => {
                tracing::warn!(listener = %self.listener,
                    "certificate files changed but do not load ({message}); keeping the previous certificates until they are fixed");
                // Remember the bad bytes so the warning is not repeated every check.
                let mut current = self.current.write();
                for (path, bytes) in current.files.iter_mut() {
                    if let Ok(now) = read_limited(path) {
                        *bytes = now;
                    }
                }
                false
            }
        }
    }
}

fn read_limited(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(MAX_STORE_FILE_BYTES + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_STORE_FILE_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "{} is larger than {MAX_STORE_FILE_BYTES} bytes; is it the right file?",
                path.display()
            ),
        ));
    }
    Ok(bytes)
}

/// The crypto provider with only the configured cipher suites.
fn provider(settings: &TlsSettings) -> Result<Arc<CryptoProvider>, String> {
    let mut provider = rustls::crypto::ring::default_provider();
    if !settings.cipher_suites.is_empty() {
        let wanted: Vec<String> = settings.cipher_suites.iter().map(|s| iana_name(s)).collect();
        let available: Vec<String> = provider
            .cipher_suites
            .iter()
            .filter_map(|s| s.suite().as_str().map(iana_name))
            .collect();
        if let Some(unknown) = wanted.iter().find(|w| !available.contains(w)) {
            return Err(format!(
                "ssl.cipher.suites names {unknown}, which is not offered; choose from {}",
                available.join(", ")
            ));
        }
        provider
            .cipher_suites
            .retain(|s| s.suite().as_str().is_some_and(|name| wanted.contains(&iana_name(name))));
    }
    Ok(Arc::new(provider))
}

/// rustls writes TLS 1.3 suites as `TLS13_...`; Kafka (and IANA) as `TLS_...`.
fn iana_name(name: &str) -> String {
    name.trim()
        .strip_prefix("TLS13_")
        .map_or_else(|| name.trim().to_string(), |rest| format!("TLS_{rest}"))
}

fn versions(settings: &TlsSettings) -> Vec<&'static rustls::SupportedProtocolVersion> {
    settings
        .enabled_protocols
        .iter()
        .map(|v| match v {
            TlsVersion::Tls12 => &rustls::version::TLS12,
            TlsVersion::Tls13 => &rustls::version::TLS13,
        })
        .collect()
}

fn build(settings: &TlsSettings) -> Result<Loaded, String> {
    let mut files = Vec::new();
    let (chain, key) = keystore(settings, &mut files)?;
    let trusted = truststore(settings, &mut files)?;
    let provider = provider(settings)?;
    let versions = versions(settings);
    let roots = trusted.as_ref().map(|certs| {
        let mut roots = RootCertStore::empty();
        roots.add_parsable_certificates(certs.iter().cloned());
        Arc::new(roots)
    });
    let verifier = match (settings.client_auth, &roots) {
        (ClientAuth::None, _) => WebPkiClientVerifier::no_client_auth(),
        (_, None) => {
            return Err("ssl.client.auth asks for client certificates, but there is no truststore to check them against; set ssl.truststore.location (or ssl.truststore.certificates)".into())
        }
        (auth, Some(roots)) => {
            let builder = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone());
            let builder = if auth == ClientAuth::Requested {
                builder.allow_unauthenticated()
            } else {
                builder
            };
            builder
                .build()
                .map_err(|e| format!("the truststore cannot check client certificates: {e}"))?
        }
    };
    let mut server = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| format!("ssl.enabled.protocols and ssl.cipher.suites have nothing in common: {e}"))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain.clone(), key.clone_key())
        .map_err(|e| format!("the keystore's certificate and key do not go together: {e}"))?;
    // No TLS 1.3 session tickets. Kafka connections live for hours, so resumption saves next to
    // nothing, and a NewSessionTicket arriving before the client's first request makes
    // kafka-python (2.3) drop the connection as unexpected input (dpkp/kafka-python#2369).
    server.send_tls13_tickets = 0;
    let client = client_config(settings, provider, &versions, roots, chain, key)?;
    Ok(Loaded {
        server: Arc::new(server),
        client: Arc::new(client),
        files,
    })
}

/// How this broker dials another broker's TLS listener: trusting the truststore (or the
/// public web PKI without one, as the JVM's default truststore would), presenting this
/// broker's certificate when the other asks for one.
fn client_config(
    settings: &TlsSettings,
    provider: Arc<CryptoProvider>,
    versions: &[&'static rustls::SupportedProtocolVersion],
    roots: Option<Arc<RootCertStore>>,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<ClientConfig, String> {
    let roots = roots.unwrap_or_else(|| {
        Arc::new(RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        })
    });
    let verifier = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
        .build()
        .map_err(|e| format!("the truststore cannot check other brokers' certificates: {e}"))?;
    let verifier: Arc<dyn ServerCertVerifier> = if settings.endpoint_identification {
        verifier
    } else {
        Arc::new(AnyHostName(verifier))
    };
    ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .map_err(|e| format!("ssl.enabled.protocols and ssl.cipher.suites have nothing in common: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_client_auth_cert(chain, key)
        .map_err(|e| format!("the keystore's certificate and key do not go together: {e}"))
}

/// How the `sluice` client commands dial a TLS listener: trusting the certificates in the PEM
/// file `ca_pem` (`ssl.ca.location`), or the public web PKI without one, checking the host
/// name, presenting no certificate.
/// `identity` is the client's own certificate chain and private key, as PEM (librdkafka's
/// `ssl.certificate.location` and `ssl.key.location`), for listeners with `ssl.client.auth`.
pub fn operator_client_config(
    ca_pem: Option<&[u8]>,
    identity: Option<(&[u8], &[u8])>,
) -> Result<Arc<ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = match ca_pem {
        None => RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        },
        Some(pem) => {
            let mut roots = RootCertStore::empty();
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
                .collect::<Result<_, _>>()
                .map_err(|e| format!("ssl.ca.location is not a PEM file of certificates: {e}"))?;
            if certs.is_empty() {
                return Err("ssl.ca.location holds no PEM certificate".into());
            }
            roots.add_parsable_certificates(certs);
            roots
        }
    };
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("no TLS version to offer: {e}"))?
        .with_root_certificates(roots);
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some((certificate_pem, key_pem)) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(certificate_pem)
                .collect::<Result<_, _>>()
                .map_err(|e| format!("ssl.certificate.location is not a PEM file of certificates: {e}"))?;
            if chain.is_empty() {
                return Err("ssl.certificate.location holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into());
            }
            let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|_| {
                "ssl.key.location holds no unencrypted PEM private key (-----BEGIN PRIVATE KEY----- or RSA/EC PRIVATE KEY)"
                    .to_string()
            })?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("ssl.certificate.location and ssl.key.location do not go together: {e}"))?
        }
    };
    Ok(Arc::new(config))
}

/// `ssl.endpoint.identification.algorithm=` (empty): the chain is checked, the host name not.
#[derive(Debug)]
struct AnyHostName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyHostName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName))
            | Err(rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForNameContext { .. })) => {
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

fn store_kind(declared: StoreType, bytes: &[u8], what: &str) -> Result<StoreType, String> {
    if bytes.starts_with(&JKS_MAGIC) {
        return Err(format!("{what} is a JKS store. {JKS_REFUSAL}"));
    }
    Ok(match declared {
        StoreType::FromFile if bytes.trim_ascii_start().starts_with(b"-----BEGIN") => StoreType::Pem,
        StoreType::FromFile => StoreType::Pkcs12,
        given => given,
    })
}

fn read_store(path: &Path, setting: &str, files: &mut Vec<(PathBuf, Vec<u8>)>) -> Result<Vec<u8>, String> {
    let bytes = read_limited(path)
        .map_err(|e| format!("{setting} {}: {e}; check the path and its permissions", path.display()))?;
    files.push((path.to_path_buf(), bytes.clone()));
    Ok(bytes)
}

/// The certificate chain (leaf first) and private key.
fn keystore(
    settings: &TlsSettings,
    files: &mut Vec<(PathBuf, Vec<u8>)>,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
    let (bytes, kind, what) = match (&settings.keystore_location, &settings.keystore_certificate_chain) {
        (Some(path), _) => {
            let bytes = read_store(path, "ssl.keystore.location", files)?;
            let what = format!("ssl.keystore.location {}", path.display());
            let kind = store_kind(settings.keystore_type, &bytes, &what)?;
            (bytes, kind, what)
        }
        (None, Some(chain)) => {
            let key = settings.keystore_key.as_ref().map(|k| k.expose()).unwrap_or_default();
            let pem = format!("{}\n{key}\n", chain.expose());
            (
                pem.into_bytes(),
                StoreType::Pem,
                "ssl.keystore.certificate.chain".to_string(),
            )
        }
        (None, None) => return Err("no certificate: set ssl.keystore.location".into()),
    };
    match kind {
        StoreType::Pkcs12 => {
            let password = settings
                .keystore_password
                .as_ref()
                .map(|p| p.expose())
                .unwrap_or_default();
            let store = p12_keystore::KeyStore::from_pkcs12(&bytes, password, p12_keystore::Pkcs12ImportPolicy::Relaxed)
                .map_err(|e| format!("{what} does not open as PKCS12 with ssl.keystore.password ({e}); check the password, or set ssl.keystore.type=PEM for a PEM file"))?;
            let (_, chain) = store
                .private_key_chain()
                .ok_or_else(|| format!("{what} holds no private key with its certificate"))?;
            let certs: Vec<CertificateDer<'static>> = chain
                .certs()
                .iter()
                .map(|c| CertificateDer::from(c.as_der().to_vec()))
                .collect();
            if certs.is_empty() {
                return Err(format!("{what} holds a private key without its certificate"));
            }
            let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(chain.key().as_der().to_vec()));
            Ok((certs, key))
        }
        _ => {
            if bytes.windows(29).any(|w| w == b"-----BEGIN ENCRYPTED PRIVATE") {
                return Err(format!("{what} holds an encrypted private key; decrypt it (`openssl pkcs8 -in key.pem -out key-plain.pem`, then keep that file private) or use a PKCS12 keystore with ssl.keystore.password"));
            }
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&bytes)
                .collect::<Result<_, _>>()
                .map_err(|e| format!("{what} is not valid PEM: {e}"))?;
            if certs.is_empty() {
                return Err(format!("{what} holds no certificate (-----BEGIN CERTIFICATE-----)"));
            }
            let key = PrivateKeyDer::from_pem_slice(&bytes).map_err(|_| {
                format!("{what} holds no private key (-----BEGIN PRIVATE KEY----- or RSA/EC PRIVATE KEY); put the key in the same file after the certificates")
            })?;
            Ok((certs, key))
        }
    }
}

/// The trusted CA certificates, if a truststore is configured.
fn truststore(
    settings: &TlsSettings,
    files: &mut Vec<(PathBuf, Vec<u8>)>,
) -> Result<Option<Vec<CertificateDer<'static>>>, String> {
    let (bytes, kind, what) = match (&settings.truststore_location, &settings.truststore_certificates) {
        (Some(path), _) => {
            let bytes = read_store(path, "ssl.truststore.location", files)?;
            let what = format!("ssl.truststore.location {}", path.display());
            let kind = store_kind(settings.truststore_type, &bytes, &what)?;
            (bytes, kind, what)
        }
        (None, Some(pem)) => (
            pem.expose().as_bytes().to_vec(),
            StoreType::Pem,
            "ssl.truststore.certificates".to_string(),
        ),
        (None, None) => return Ok(None),
    };
    let certs: Vec<CertificateDer<'static>> = match kind {
        StoreType::Pkcs12 => {
            let password = settings
                .truststore_password
                .as_ref()
                .map(|p| p.expose())
                .unwrap_or_default();
            let store = p12_keystore::KeyStore::from_pkcs12(&bytes, password, p12_keystore::Pkcs12ImportPolicy::Raw)
                .map_err(|e| {
                    format!("{what} does not open as PKCS12 with ssl.truststore.password ({e}); check the password")
                })?;
            store
                .entries()
                .filter_map(|(_, entry)| match entry {
                    p12_keystore::KeyStoreEntry::Certificate(c) => Some(CertificateDer::from(c.as_der().to_vec())),
                    _ => None,
                })
                .collect()
        }
        _ => CertificateDer::pem_slice_iter(&bytes)
            .collect::<Result<_, _>>()
            .map_err(|e| format!("{what} is not valid PEM: {e}"))?,
    };
    if certs.is_empty() {
        return Err(format!("{what} holds no certificate to trust"));
    }
    Ok(Some(certs))
}

/// A certificate's subject as Java's `X500Principal.getName()` writes it (RFC 2253: the most
/// specific name first, `CN=client,OU=eng,O=acme,C=US`), which Kafka's mapping rules expect.
pub fn distinguished_name(certificate: &[u8]) -> Option<String> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let (_, cert) = X509Certificate::from_der(certificate).ok()?;
    let rdns: Vec<String> = cert
        .subject()
        .iter_rdn()
        .map(|rdn| {
            rdn.iter()
                .map(|attr| {
                    let oid = attr.attr_type().to_id_string();
                    match (short_name(&oid), attr.as_str()) {
                        (Some(name), Ok(value)) => format!("{name}={}", escape_rfc2253(value)),
                        _ => {
                            let value = attr.attr_value();
                            let mut der = vec![value.header.tag().0 as u8];
                            let len = value.data.len();
                            if len < 128 {
                                der.push(len as u8);
                            } else {
                                let bytes: Vec<u8> =
                                    len.to_be_bytes().iter().copied().skip_while(|b| *b == 0).collect();
                                der.push(0x80 | bytes.len() as u8);
                                der.extend(bytes);
                            }
                            der.extend_from_slice(value.data);
                            let hex: String = der.iter().map(|b| format!("{b:02x}")).collect();
                            format!("{oid}=#{hex}")
                        }
                    }
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    Some(rdns.into_iter().rev().collect::<Vec<_>>().join(","))
}

/// The attribute keywords Java's RFC 2253 output uses; others are written as dotted OIDs.
fn short_name(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "STREET",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        _ => return None,
    })
}

fn escape_rfc2253(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The principal a TLS client's certificate maps to (`User:<name>`, as Kafka's
/// `KafkaPrincipal(User, name)`: what ACLs and `super.users` name), `None` when no mapping
/// rule applies (the connection is refused), or ANONYMOUS when it sent no certificate.
pub fn certificate_principal(rules: &[Rule], peer_certificates: Option<&[CertificateDer<'_>]>) -> Option<String> {
    let Some(leaf) = peer_certificates.and_then(|c| c.first()) else {
        return Some(super::ANONYMOUS.to_string());
    };
    let dn = distinguished_name(leaf.as_ref())?;
    principal_rules::apply(rules, &dn).map(|name| format!("User:{name}"))
}

/// A TLS record starts with 0x16 (handshake), then version 3.x: what a client configured for
/// TLS sends first.
pub fn looks_like_tls_hello(first_bytes: &[u8]) -> bool {
    matches!(first_bytes, [0x16, 0x03, ..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc2253_escapes_what_java_escapes() {
        assert_eq!(escape_rfc2253("a,b"), "a\\,b");
        assert_eq!(escape_rfc2253("#x "), "\\#x\\ ");
        assert_eq!(escape_rfc2253("plain"), "plain");
    }

    #[test]
    fn cipher_suite_names_compare_in_iana_form() {
        assert_eq!(iana_name("TLS13_AES_128_GCM_SHA256"), "TLS_AES_128_GCM_SHA256");
        assert_eq!(
            iana_name("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"
        );
    }

    /// A client certificate for `CN=compat-client,OU=eng,O=acme,C=US` (EC P-256, X.509 v3, made
    /// by integration-tests/python/security_certs.py); only its subject is read here.
    const CLIENT_CERT: &str = "-----BEGIN CERTIFICATE-----
MIIB4DCCAYegAwIBAgIUOa3xLB8G5E9Oo8MbYCJbAu/CJBowCgYIKoZIzj0EAwIw
KDENMAsGA1UECgwEYWNtZTEXMBUGA1UEAwwOU2x1aWNlIFRlc3QgQ0EwHhcNMjYx
MjA0MTYzMjI3WhcNMjcwMTAzMTczMjI3WjBCMQswCQYDVQQGEwJVUzENMAsGA1UE
CgwEYWNtZTEMMAoGA1UECwwDZW5nMRYwFAYDVQQDDA1jb21wYXQtY2xpZW50MFkw
EwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEdH/DcoxgJ+S0drCchpU5ISeZcs0Q6nPP
lLfZ0JUIcR7tiU8E/r0/R5LZyfcuCVTtPv6Z+0AOIhDEhY+isbAp+KN1MHMwDAYD
VR0TAQH/BAIwADAOBgNVHQ8BAf8EBAMCA4gwEwYDVR0lBAwwCgYIKwYBBQUHAwIw
HQYDVR0OBBYEFECauISfzEb3xtGYxmbzWGY4bm4kMB8GA1UdIwQYMBaAFOviSO0v
bldwvemcVXMiqHEICaLUMAoGCCqGSM49BAMCA0cAMEQCIHPCoZxVJgwCy5PBNeaj
Q6uLy1+E6hEJKFC/8sOgAydJAiBCLLg5mfQkXr8mQ1f+DMP8BC05Sb+awttQe/81
LGTsUA==
-----END CERTIFICATE-----
";

    #[test]
    fn a_client_certificate_is_a_user_principal_as_acls_and_super_users_name_it() {
        let cert = CertificateDer::from_pem_slice(CLIENT_CERT.as_bytes()).unwrap();
        let principal =
            |rules: &str| certificate_principal(&principal_rules::parse(rules).unwrap(), Some(&[cert.clone()]));
        assert_eq!(
            principal("DEFAULT").as_deref(),
            Some("User:CN=compat-client,OU=eng,O=acme,C=US")
        );
        assert_eq!(
            principal("RULE:^CN=(.*?),OU=.*$/$1/U").as_deref(),
            Some("User:COMPAT-CLIENT")
        );
        assert_eq!(principal("RULE:^CN=(alice),.*$/$1/"), None);
        assert_eq!(
            certificate_principal(&[Rule::Default], None).as_deref(),
            Some(super::super::ANONYMOUS)
        );
    }

    #[test]
    fn a_tls_client_hello_is_told_from_a_kafka_frame() {
        assert!(looks_like_tls_hello(&[0x16, 0x03, 0x01, 0x02, 0x00]));
        assert!(!looks_like_tls_hello(&[0x00, 0x00, 0x00, 0x2a, 0x00]));
    }
}
