//! How the demo's programs reach a secured cluster: librdkafka's own security properties
//! (`security.protocol`, `sasl.mechanisms`, `sasl.username`, `sasl.password`, `ssl.ca.location`,
//! ...) in a file that `--security-config` names, one `key=value` a line, as kcat's `-F` reads
//! them. Every Kafka client a program creates gets them; [`crate::admin`] reads the few it speaks
//! itself.
//!
//! Only `security.protocol`, `sasl.*` and `ssl.*` keys are accepted, so a security file cannot
//! quietly change what the programs guarantee (`acks=all`, idempotence, manual commits). The
//! values are secrets: they are never logged, and [`ClientSecurity`]'s `Debug` hides them.

use std::fmt;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use rdkafka::config::ClientConfig;

/// The flag every program takes.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SecurityArgs {
    /// librdkafka security properties for every client of this program, one `key=value` a line
    /// (`#` starts a comment): security.protocol, sasl.mechanisms, sasl.username,
    /// sasl.password, ssl.ca.location, ... The file kcat's -F reads.
    #[arg(long, env = "SLUICE_DEMO_SECURITY_CONFIG")]
    pub security_config: Option<PathBuf>,
}

impl SecurityArgs {
    pub fn load(&self) -> Result<ClientSecurity> {
        match &self.security_config {
            Some(path) => ClientSecurity::load(path),
            None => Ok(ClientSecurity::default()),
        }
    }
}

/// A file larger than this is not a security config.
const MAX_FILE_BYTES: u64 = 64 * 1024;

/// Security properties for Kafka clients; empty means PLAINTEXT.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ClientSecurity {
    properties: Vec<(String, String)>,
}

impl fmt::Debug for ClientSecurity {
    /// Keys only: values include passwords.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.properties.iter().map(|(k, _)| k)).finish()
    }
}

fn is_security_key(key: &str) -> bool {
    key == "security.protocol" || key.starts_with("sasl.") || key.starts_with("ssl.")
}

impl ClientSecurity {
    /// Reads `key=value` lines; blank lines and lines starting with `#` are skipped.
    pub fn load(path: &Path) -> Result<ClientSecurity> {
        let size = std::fs::metadata(path)
            .with_context(|| format!("cannot read the security config {}", path.display()))?
            .len();
        if size > MAX_FILE_BYTES {
            bail!(
                "the security config {} is {size} bytes; it should hold a few key=value lines",
                path.display()
            );
        }
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the security config {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("in the security config {}", path.display()))
    }

    pub fn parse(text: &str) -> Result<ClientSecurity> {
        let mut properties = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            // The line number only: the line itself may hold a password.
            let Some((key, value)) = line.split_once('=') else {
                bail!("line {} is not key=value", i + 1);
            };
            let key = key.trim();
            if !is_security_key(key) {
                bail!(
                    "line {}: {key:?} is not a security property; only security.protocol, sasl.* and ssl.* are taken",
                    i + 1
                );
            }
            properties.push((key.to_string(), value.trim().to_string()));
        }
        Ok(ClientSecurity { properties })
    }

    /// The value of `key`, the last one if it is given twice (as librdkafka takes it).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.properties
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// `security.protocol`, PLAINTEXT if not set.
    pub fn protocol(&self) -> String {
        self.get("security.protocol")
            .unwrap_or("PLAINTEXT")
            .to_ascii_uppercase()
    }

    /// Sets every property on `config`.
    pub fn apply(&self, config: &mut ClientConfig) {
        for (key, value) in &self.properties {
            config.set(key, value);
        }
    }

    /// A SASL_SSL login with SCRAM-SHA-512, trusting the CA certificate in `ca`.
    pub fn scram_sha512(username: &str, password: &str, ca: &Path) -> ClientSecurity {
        let properties = [
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanisms", "SCRAM-SHA-512"),
            ("sasl.username", username),
            ("sasl.password", password),
            ("ssl.ca.location", &ca.display().to_string()),
        ];
        ClientSecurity {
            properties: properties
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    /// Writes the properties to `path`, readable by the owner only (mode 0600): the file
    /// holds a password.
    pub fn write(&self, path: &Path, heading: &str) -> Result<()> {
        let mut text = String::new();
        for line in heading.lines() {
            text.push_str(&format!("# {line}\n"));
        }
        for (key, value) in &self.properties {
            text.push_str(&format!("{key}={value}\n"));
        }
        write_private(path, text.as_bytes())
    }
}

/// Creates or replaces `path` with `bytes`, mode 0600 (a private key, a password).
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    // A file left from before with wider permissions is not reused: mode applies on creation.
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot replace {}", path.display())),
    }
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    f.write_all(bytes)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_security_properties_and_refuses_others_without_echoing_values() {
        let s = ClientSecurity::parse(
            "# analytics\nsecurity.protocol=sasl_ssl\n\nsasl.mechanisms = SCRAM-SHA-512\nsasl.password=a=b\n",
        )
        .unwrap();
        assert_eq!(s.protocol(), "SASL_SSL");
        assert_eq!(s.get("sasl.password"), Some("a=b"));
        assert!(!format!("{s:?}").contains("a=b"));
        let err = format!("{:#}", ClientSecurity::parse("acks=0\n").unwrap_err());
        assert!(err.contains("\"acks\" is not a security property"), "{err}");
        let err = format!("{:#}", ClientSecurity::parse("hunter2\n").unwrap_err());
        assert!(!err.contains("hunter2"), "{err}");
    }
}
