//! A test CA and the local nodes' TLS certificates for `run --secure`, made with rcgen (ECDSA
//! P-256, X.509 v3 as rustls requires) and written as PEM files:
//!
//! - `ca.pem`: the CA certificate, which clients trust (`ssl.ca.location`) and the brokers
//!   trust when they replicate from each other (`ssl.truststore.location`);
//! - `node-N.pem`: node N's certificate (for `127.0.0.1` and `localhost`), the CA certificate
//!   after it, then its unencrypted private key, mode 0600: the broker's
//!   `ssl.keystore.location`.
//!
//! New ones are made at every start; the CA's key is never written, so nothing else can be
//! signed with it.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};

use crate::security::write_private;

/// The files [`make`] wrote.
pub struct TestPki {
    pub ca: PathBuf,
    /// Node `id`'s keystore is `keystores[id - 1]`.
    pub keystores: Vec<PathBuf>,
}

/// Writes `ca.pem` and `node-1.pem` ... `node-<nodes>.pem` into `dir`.
pub fn make(dir: &Path, nodes: u16) -> Result<TestPki> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "sluice-demo test CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_pem = ca_params.self_signed(&ca_key)?.pem();
    let issuer = Issuer::new(ca_params, ca_key);
    let ca = dir.join("ca.pem");
    std::fs::write(&ca, &ca_pem).with_context(|| format!("cannot write {}", ca.display()))?;
    let mut keystores = Vec::new();
    for id in 1..=nodes {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])?;
        params
            .distinguished_name
            .push(DnType::CommonName, format!("sluice-demo node {id}"));
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        // ClientAuth too: a follower presents it when a leader asks for a client certificate.
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&key, &issuer)?;
        let keystore = dir.join(format!("node-{id}.pem"));
        write_private(
            &keystore,
            format!("{}{ca_pem}{}", cert.pem(), key.serialize_pem()).as_bytes(),
        )?;
        keystores.push(keystore);
    }
    Ok(TestPki { ca, keystores })
}
