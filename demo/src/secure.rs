//! What `run --secure` makes in `--data-dir`/`secure/` and how the brokers and programs use it:
//!
//! - the test CA and the nodes' certificates ([`certs`]);
//! - one librdkafka properties file per user, `<user>.properties` (mode 0600): SASL_SSL,
//!   SCRAM-SHA-512, the user's name and password, the CA. The programs take theirs with
//!   `--security-config`; `kcat -b 127.0.0.1:19092 -F secure/admin.properties -L` works as well.
//!
//! Each password is random, made the first time and read back from its file afterwards: the
//! brokers create a user only if the cluster has none of that name, so a password must not
//! change while the cluster's data lives. Passwords reach the brokers in their environment
//! (`SLUICE_ADD_SCRAM`), never on a command line, and are never printed or logged.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rand::RngCore;

use crate::acls::{ADMIN, USERS};
use crate::certs::{self, TestPki};
use crate::security::ClientSecurity;

/// The brokers' settings that differ from an unsecured node (docs/security.md).
const AUTHORIZER: &str = "org.apache.kafka.metadata.authorizer.StandardAuthorizer";
const MECHANISM: &str = "SCRAM-SHA-512";

pub struct SecureFiles {
    dir: PathBuf,
    pki: TestPki,
    /// (user, password), in [`USERS`] order.
    passwords: Vec<(String, String)>,
}

fn random_password() -> String {
    let mut bytes = [0u8; 24];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl SecureFiles {
    /// Makes `data_dir/secure/` (mode 0700): new certificates for `nodes` nodes, and each
    /// user's properties file, keeping the password a previous run chose.
    pub fn prepare(data_dir: &Path, nodes: u16) -> Result<SecureFiles> {
        let dir = data_dir.join("secure");
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        let pki = certs::make(&dir, nodes).context("cannot make the test certificates")?;
        let mut passwords = Vec::new();
        for user in USERS {
            let path = dir.join(format!("{user}.properties"));
            let kept = path
                .exists()
                .then(|| ClientSecurity::load(&path))
                .transpose()?
                .filter(|s| s.get("sasl.username") == Some(user))
                .and_then(|s| s.get("sasl.password").map(str::to_string));
            let password = kept.unwrap_or_else(random_password);
            ClientSecurity::scram_sha512(user, &password, &pki.ca).write(
                &path,
                &format!(
                    "The demo's {user} login (sluice-demo run --secure). Keep it private.\nkcat -b <broker> -F {} ...",
                    path.display()
                ),
            )?;
            passwords.push((user.to_string(), password));
        }
        Ok(SecureFiles { dir, pki, passwords })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CA certificate clients trust.
    pub fn ca(&self) -> &Path {
        &self.pki.ca
    }

    /// `user`'s properties file, for `--security-config`.
    pub fn client_config(&self, user: &str) -> PathBuf {
        self.dir.join(format!("{user}.properties"))
    }

    /// `user`'s login.
    pub fn client_security(&self, user: &str) -> Result<ClientSecurity> {
        let (_, password) = self
            .passwords
            .iter()
            .find(|(u, _)| u == user)
            .with_context(|| format!("{user} is not a user of the secured demo"))?;
        Ok(ClientSecurity::scram_sha512(user, password, &self.pki.ca))
    }

    /// `SLUICE_ADD_SCRAM` for the brokers: every user with its password. A secret.
    pub fn add_scram(&self) -> String {
        self.passwords
            .iter()
            .map(|(user, password)| format!("{MECHANISM}=[name={user},password={password}]"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Node `id`'s `--set` values: its one listener, `listener` (`host:port`), speaking
    /// SASL_SSL to clients and to the other brokers, SCRAM-SHA-512 logins, ACLs, `admin` a
    /// super user.
    pub fn broker_settings(&self, id: u16, listener: &str) -> Result<Vec<String>> {
        let keystore = self
            .pki
            .keystores
            .get(usize::from(id) - 1)
            .with_context(|| format!("no certificate was made for node {id}"))?;
        Ok(vec![
            format!("listeners=SASL_SSL://{listener}"),
            "ssl.keystore.type=PEM".to_string(),
            format!("ssl.keystore.location={}", keystore.display()),
            "ssl.truststore.type=PEM".to_string(),
            format!("ssl.truststore.location={}", self.pki.ca.display()),
            format!("sasl.enabled.mechanisms={MECHANISM}"),
            format!("authorizer.class.name={AUTHORIZER}"),
            format!("super.users=User:{ADMIN}"),
        ])
    }
}
