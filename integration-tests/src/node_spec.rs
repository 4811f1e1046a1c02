//! How a test node is started, read from `integration-tests/node.json`: the one description the
//! Rust harness ([`crate::node`], [`crate::cluster`]) and the Python one (`python/sluice_node.py`)
//! share, so the two start the broker the same way. What stays here and in each harness is only
//! the mechanics of one language (spawning, sockets, temporary directories).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
pub struct NodeSpec {
    pub binary: BinarySpec,
    pub host: String,
    pub work_dir: WorkDirSpec,
    /// The command line before settings, with `{node_id}`, `{data_dir}` and `{addr}`.
    pub args: Vec<String>,
    /// How a node with [`crate::NodeOptions::listener`] is started instead.
    pub named_listeners: NamedListenersSpec,
    pub setting_flag: String,
    /// One setting's argument, with `{key}` and `{value}`.
    pub setting: String,
    /// Settings every test node gets before its own.
    pub settings: BTreeMap<String, String>,
    pub env: BTreeMap<String, String>,
    pub env_if_unset: BTreeMap<String, String>,
    /// A line the harness writes into the node's log, with `{note}`.
    pub log_note: String,
    /// Starts tried on a freshly picked port when the broker exits early (lost the port race).
    pub start_attempts: usize,
    pub ready: ReadySpec,
    pub cluster: ClusterSpec,
}

/// A node whose listeners are named (`listeners=NAME://host:port,...`, each with its security
/// protocol) rather than given by `--listen`/`--advertise`.
#[derive(Debug, Deserialize)]
pub struct NamedListenersSpec {
    /// Replaces `args`, with `{node_id}` and `{data_dir}`.
    pub args: Vec<String>,
    /// One listener, with `{name}`, `{host}` and `{port}`.
    pub listener: String,
    /// One listener's protocol-map entry, with `{name}` and `{protocol}`.
    pub protocol: String,
    pub separator: String,
    /// Settings added first, with `{listeners}` and `{protocol_map}`.
    pub settings: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
pub struct BinarySpec {
    pub env: String,
    pub target_dir_env: String,
    pub default_target_dir: String,
    pub in_target_dir: Vec<String>,
}

#[derive(Debug, Deserialize)]
pub struct WorkDirSpec {
    pub prefix: String,
    pub data_dir: String,
    pub log_file: String,
}

#[derive(Debug, Deserialize)]
pub struct ReadySpec {
    pub timeout_ms: u64,
    pub poll_interval_ms: u64,
    pub connect_timeout_ms: u64,
    pub api_versions_version: i16,
    /// Lowest and highest Metadata version the probe may use.
    pub metadata_versions: [i16; 2],
}

#[derive(Debug, Deserialize)]
pub struct ClusterSpec {
    pub ready_timeout_ms: u64,
    /// One `--voters` entry, with `{node_id}`, `{host}` and `{controller_port}`.
    pub voter: String,
    pub voters_separator: String,
    /// Arguments after the node's own, with `{voters}` and `{secret_file}`.
    pub args: Vec<String>,
    pub secret_dir_prefix: String,
    pub secret_file: String,
    pub secret_bytes: usize,
}

impl ReadySpec {
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }
    pub fn poll_interval(&self) -> Duration {
        Duration::from_millis(self.poll_interval_ms)
    }
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms)
    }
}

impl ClusterSpec {
    pub fn ready_timeout(&self) -> Duration {
        Duration::from_millis(self.ready_timeout_ms)
    }
}

/// The parsed `node.json`, compiled in so a test binary needs no file next to it.
pub fn node_spec() -> &'static NodeSpec {
    static SPEC: OnceLock<NodeSpec> = OnceLock::new();
    SPEC.get_or_init(|| {
        serde_json::from_str(include_str!("../node.json")).expect("integration-tests/node.json is a valid NodeSpec")
    })
}

/// `template` with every `{name}` replaced by its value from `values`; fails on a placeholder
/// without a value, so a template and its harness cannot drift apart silently.
pub fn fill(template: &str, values: &[(&str, &str)]) -> Result<String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let close = rest[open..]
            .find('}')
            .with_context(|| format!("unclosed placeholder in {template:?}"))?;
        let name = &rest[open + 1..open + close];
        match values.iter().find(|(k, _)| *k == name) {
            Some((_, v)) => out.push_str(v),
            None => bail!("no value for {{{name}}} in {template:?}"),
        }
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Each template in `templates`, filled.
pub fn fill_all(templates: &[String], values: &[(&str, &str)]) -> Result<Vec<String>> {
    templates.iter().map(|t| fill(t, values)).collect()
}

impl BinarySpec {
    /// The broker binary under `workspace` as this spec says to find it.
    pub fn locate(&self, workspace: &Path) -> Result<PathBuf> {
        if let Some(p) = std::env::var_os(&self.env) {
            let p = PathBuf::from(p);
            if !p.is_file() {
                bail!("{}={} does not exist", self.env, p.display());
            }
            return Ok(p);
        }
        let target_dir = std::env::var_os(&self.target_dir_env)
            .map(PathBuf::from)
            .map(|dir| if dir.is_absolute() { dir } else { workspace.join(dir) })
            .unwrap_or_else(|| workspace.join(&self.default_target_dir));
        let candidates: Vec<PathBuf> = self.in_target_dir.iter().map(|c| target_dir.join(c)).collect();
        match candidates.iter().find(|c| c.is_file()) {
            Some(c) => Ok(c.clone()),
            None => bail!(
                "no sluice binary: set {} or run `cargo build --release -p sluice-broker` (looked at {candidates:?})",
                self.env
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spec_parses_and_its_templates_use_only_the_placeholders_the_harness_fills() {
        let spec = node_spec();
        let node = [("node_id", "1"), ("data_dir", "/d"), ("addr", "127.0.0.1:9092")];
        assert_eq!(
            fill_all(&spec.args, &node).unwrap(),
            [
                "--node-id",
                "1",
                "--data-dir",
                "/d",
                "--listen",
                "127.0.0.1:9092",
                "--advertise",
                "127.0.0.1:9092"
            ]
        );
        assert_eq!(fill(&spec.setting, &[("key", "a.b"), ("value", "1")]).unwrap(), "a.b=1");
        let named = &spec.named_listeners;
        assert_eq!(
            fill_all(&named.args, &node).unwrap(),
            ["--node-id", "1", "--data-dir", "/d"]
        );
        let listener = [("name", "SASL_SSL"), ("host", "127.0.0.1"), ("port", "9092")];
        assert_eq!(fill(&named.listener, &listener).unwrap(), "SASL_SSL://127.0.0.1:9092");
        let listeners = [
            ("listeners", "SASL_SSL://127.0.0.1:9092"),
            ("protocol_map", "SASL_SSL:SASL_SSL"),
        ];
        assert_eq!(
            fill(&named.settings["listeners"], &listeners).unwrap(),
            "SASL_SSL://127.0.0.1:9092"
        );
        assert_eq!(fill(&spec.log_note, &[("note", "hi")]).unwrap(), "=== harness: hi ===");
        let voter = [("node_id", "2"), ("host", "h"), ("controller_port", "7")];
        assert_eq!(fill(&spec.cluster.voter, &voter).unwrap(), "2@h:7");
        fill_all(&spec.cluster.args, &[("voters", "v"), ("secret_file", "f")]).unwrap();
    }

    #[test]
    fn a_placeholder_without_a_value_fails() {
        let e = fill("--x {y}", &[("z", "1")]).unwrap_err().to_string();
        assert!(e.contains("no value for {y}"), "{e}");
        assert!(fill("--x {y", &[("y", "1")]).is_err());
    }
}
