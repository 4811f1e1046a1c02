//! Test certificates made with rcgen: a test CA ([`TestCa`]) that issues X.509 v3 broker and
//! client certificates (rustls refuses version 1), written as the PEM files the broker reads
//! (`ssl.keystore.type=PEM`: the certificate chain, then its unencrypted private key) and the
//! harness and librdkafka trust (`ca.pem`). [`Pki`] is the fixed set `tests/it/security.rs`
//! uses; the secured soak (`faults/secure.rs`) issues one keystore per node and re-issues it to
//! rotate certificates under running brokers ([`write_atomically`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    SerialNumber,
};
use tempfile::TempDir;

use crate::security::TlsClient;

/// A self-signed CA that issues certificates, each with a serial number of its own.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    certificate_pem: String,
    /// Serial numbers handed out so far: a re-issued certificate never repeats one.
    issued: AtomicU64,
}

/// A certificate and its private key, both PEM.
pub struct Issued {
    pub certificate_pem: String,
    pub key_pem: String,
    pub serial: u64,
}

impl Issued {
    /// A PEM keystore as `ssl.keystore.location` of type PEM takes it: the certificate, then
    /// its key.
    pub fn keystore_pem(&self) -> String {
        format!("{}{}", self.certificate_pem, self.key_pem)
    }
}

impl TestCa {
    pub fn new(common_name: &str) -> Result<TestCa> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, common_name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate()?;
        let certificate = params.self_signed(&key)?;
        Ok(TestCa {
            issuer: Issuer::new(params, key),
            certificate_pem: certificate.pem(),
            issued: AtomicU64::new(0),
        })
    }

    /// The CA certificate, for truststores (`ssl.truststore.location`, `ssl.ca.location`).
    pub fn certificate_pem(&self) -> &str {
        &self.certificate_pem
    }

    /// A leaf certificate for `common_name` with subject alternative names `sans` (IP addresses
    /// or DNS names), for `usages`, with a fresh key and serial number.
    pub fn issue(&self, common_name: &str, sans: &[String], usages: Vec<ExtendedKeyUsagePurpose>) -> Result<Issued> {
        let serial = self.issued.fetch_add(1, Ordering::Relaxed) + 1;
        let mut params = CertificateParams::new(sans.to_vec())?;
        params.distinguished_name.push(DnType::CommonName, common_name);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = usages;
        params.use_authority_key_identifier_extension = true;
        params.serial_number = Some(SerialNumber::from(serial));
        let key = KeyPair::generate()?;
        Ok(Issued {
            certificate_pem: params.signed_by(&key, &self.issuer)?.pem(),
            key_pem: key.serialize_pem(),
            serial,
        })
    }

    /// A broker certificate naming `sans`, for server and client authentication: brokers
    /// present it to clients and to each other (mutual TLS between brokers).
    pub fn issue_broker(&self, common_name: &str, sans: &[String]) -> Result<Issued> {
        self.issue(
            common_name,
            sans,
            vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth],
        )
    }
}

/// Replaces `path` with `text` in one step (a new file renamed over the old), as cert-manager
/// or a renewal job does: a reader sees the old file or the new one, never half of one.
pub fn write_atomically(path: &Path, text: &str) -> Result<()> {
    let file_name = path.file_name().context("a file path")?.to_string_lossy();
    let staged = path.with_file_name(format!(".{file_name}.new"));
    std::fs::write(&staged, text).with_context(|| format!("writing {}", staged.display()))?;
    std::fs::rename(&staged, path).with_context(|| format!("renaming {} over {}", staged.display(), path.display()))
}

/// A test CA and certificates it signed, as PEM files in a temporary directory: one broker
/// keystore naming 127.0.0.1 and localhost (every node presents it), and a client certificate.
pub struct Pki {
    _dir: TempDir,
    pub ca: PathBuf,
    /// The brokers' PEM keystore: certificate, then its private key.
    pub broker_keystore: PathBuf,
    pub client_certificate: PathBuf,
    pub client_key: PathBuf,
}

impl Pki {
    pub fn new() -> Result<Pki> {
        let dir = tempfile::Builder::new().prefix("sluice-it-pki-").tempdir()?;
        let ca = TestCa::new("sluice-it test CA")?;
        let broker = ca.issue_broker("sluice-it broker", &["127.0.0.1".into(), "localhost".into()])?;
        let client = ca.issue("sluice-it client", &[], vec![ExtendedKeyUsagePurpose::ClientAuth])?;
        let write = |name: &str, text: &str| -> Result<PathBuf> {
            let path = dir.path().join(name);
            std::fs::write(&path, text)?;
            Ok(path)
        };
        Ok(Pki {
            ca: write("ca.pem", ca.certificate_pem())?,
            broker_keystore: write("broker-keystore.pem", &broker.keystore_pem())?,
            client_certificate: write("client.pem", &client.certificate_pem)?,
            client_key: write("client.key", &client.key_pem)?,
            _dir: dir,
        })
    }

    /// The brokers' `ssl.*` settings (PEM keystore and truststore).
    pub fn broker_settings(&self) -> Vec<(String, String)> {
        pem_store_settings(&self.broker_keystore, &self.ca)
    }

    /// A TLS client trusting the test CA, presenting the client certificate if `with_certificate`.
    pub fn client(&self, with_certificate: bool) -> TlsClient {
        TlsClient {
            ca_pem: self.ca.clone(),
            identity: with_certificate.then(|| (self.client_certificate.clone(), self.client_key.clone())),
        }
    }
}

/// `ssl.keystore.*` and `ssl.truststore.*` for a PEM keystore and a PEM CA file.
pub fn pem_store_settings(keystore: &Path, ca: &Path) -> Vec<(String, String)> {
    [
        ("ssl.keystore.type", "PEM".to_string()),
        ("ssl.keystore.location", keystore.display().to_string()),
        ("ssl.truststore.type", "PEM".to_string()),
        ("ssl.truststore.location", ca.display().to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}
