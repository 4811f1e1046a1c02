//! Several `sluice` processes forming one cluster on loopback: each a broker and a voter of
//! the metadata quorum (`--voters`), on ports picked up front so every node gets the same list,
//! sharing a cluster secret made for this cluster alone (`--cluster-secret-file`).
//! [`Cluster::start_partitionable`] runs each node in its own network namespace instead
//! ([`Net`]), on its own address with fixed ports, so the tests can cut links between nodes.

use std::io::Read;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use kafka_protocol::messages::{describe_quorum_request, DescribeQuorumRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::{Request, StrBytes};
use tempfile::TempDir;

use crate::faults::{Net, KAFKA_PORT, QUORUM_PORT};
use crate::kafka_client;
use crate::node::{free_loopback_port, loopback_addr, NodeOptions, SluiceNode};
use crate::node_spec::{fill, fill_all, node_spec};
use crate::security::ClientSecurity;

pub struct Cluster {
    nodes: Vec<SluiceNode>,
    /// Each node's controller (quorum) listener, by position (node id - 1).
    controllers: Vec<SocketAddr>,
    secret: String,
    /// Holds the secret file the nodes read at every (re)start.
    _secret_dir: TempDir,
    /// The nodes' namespaces, for a partitionable cluster. Last, so the nodes are killed
    /// before their namespaces go.
    net: Option<Net>,
}

/// A fresh random cluster secret (`secret_bytes` from the OS, hex-encoded) in
/// `dir/<secret_file>` (`cluster` in `node.json`).
fn write_cluster_secret(dir: &Path) -> Result<(String, PathBuf)> {
    let spec = &node_spec().cluster;
    let mut bytes = vec![0u8; spec.secret_bytes];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("reading /dev/urandom for a cluster secret")?;
    let secret: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let path = dir.join(&spec.secret_file);
    std::fs::write(&path, format!("{secret}\n"))?;
    Ok((secret, path))
}

/// Runs `start` until it does not lose a port race, at most 3 times: ports are picked free up
/// front, so another process can take one before its broker binds it, and such a start is
/// retried on fresh ports. Any other failure is returned at once.
pub fn retry_port_races(mut start: impl FnMut() -> Result<Cluster>) -> Result<Cluster> {
    let mut attempt = 1;
    loop {
        match start() {
            Err(e) if attempt < 3 && format!("{e:#}").contains("Address already in use") => {
                eprintln!("cluster start lost a port race (attempt {attempt}); retrying on other ports");
                attempt += 1;
            }
            result => return result,
        }
    }
}

impl Cluster {
    /// Starts `size` nodes (ids 1..=size) with `settings` on each, and waits until every one
    /// is registered and lists itself in Metadata.
    pub fn start(size: usize, settings: &[(&str, &str)]) -> Result<Cluster> {
        Self::start_with(size, settings, true)
    }

    /// [`Self::start`], choosing whether dropped nodes print their log tail (`report_on_drop`;
    /// off for non-test users such as the benchmark).
    pub fn start_with(size: usize, settings: &[(&str, &str)], report_on_drop: bool) -> Result<Cluster> {
        Self::start_each(size, settings, report_on_drop, |_| Vec::new())
    }

    /// [`Self::start_with`], adding the settings `per_node(id)` to node `id` alone (e.g. its
    /// own `metrics.listen` address).
    pub fn start_each(
        size: usize,
        settings: &[(&str, &str)],
        report_on_drop: bool,
        per_node: impl Fn(i32) -> Vec<(String, String)>,
    ) -> Result<Cluster> {
        Self::start_custom(size, settings, report_on_drop, per_node, |_, _| {})
    }

    /// [`Self::start_each`], letting `customise(id, options)` change node `id`'s options
    /// (e.g. `lazyfs`) before it is spawned.
    pub fn start_custom(
        size: usize,
        settings: &[(&str, &str)],
        report_on_drop: bool,
        per_node: impl Fn(i32) -> Vec<(String, String)>,
        customise: impl Fn(i32, &mut NodeOptions),
    ) -> Result<Cluster> {
        // Loopback ports are picked free and released before the nodes bind them, so another
        // process can take one in between: such a start is retried on other ports.
        retry_port_races(|| Self::launch(size, settings, report_on_drop, &per_node, &customise, None))
    }

    /// [`Self::start`] with each node in its own network namespace on one bridge, listening
    /// and advertising on its own address (Kafka port [`KAFKA_PORT`], controller port
    /// [`QUORUM_PORT`]); clients on the host reach them over the bridge. [`Self::net`] cuts
    /// and heals the links between them. Needs root, `ip` and `nft`.
    pub fn start_partitionable(size: usize, settings: &[(&str, &str)]) -> Result<Cluster> {
        Self::launch(
            size,
            settings,
            true,
            |_| Vec::new(),
            |_, _| {},
            Some(Net::create(size)?),
        )
    }

    /// [`Self::start_partitionable`], letting `customise(id, options)` change node `id`'s
    /// options (its `host` is already its address on the bridge) before it is spawned.
    pub fn start_partitionable_custom(
        size: usize,
        settings: &[(&str, &str)],
        customise: impl Fn(i32, &mut NodeOptions),
    ) -> Result<Cluster> {
        Self::launch(
            size,
            settings,
            true,
            |_| Vec::new(),
            customise,
            Some(Net::create(size)?),
        )
    }

    /// The network faults of a cluster started with [`Self::start_partitionable`].
    pub fn net(&self) -> Option<&Net> {
        self.net.as_ref()
    }

    fn launch(
        size: usize,
        settings: &[(&str, &str)],
        report_on_drop: bool,
        per_node: impl Fn(i32) -> Vec<(String, String)>,
        customise: impl Fn(i32, &mut NodeOptions),
        net: Option<Net>,
    ) -> Result<Cluster> {
        let spec = node_spec();
        // (host, Kafka port, controller port, namespace) per node.
        let endpoints: Vec<(IpAddr, u16, u16, Option<String>)> = match &net {
            Some(net) => (1..=size as i32)
                .map(|id| {
                    Ok((
                        net.address(id)?.into(),
                        KAFKA_PORT,
                        QUORUM_PORT,
                        Some(net.namespace(id)?.to_string()),
                    ))
                })
                .collect::<Result<_>>()?,
            None => (0..size)
                .map(|_| {
                    Ok((
                        loopback_addr(0).ip(),
                        free_loopback_port()?,
                        free_loopback_port()?,
                        None,
                    ))
                })
                .collect::<Result<_>>()?,
        };
        let voters: Vec<String> = endpoints
            .iter()
            .enumerate()
            .map(|(i, (host, _, controller, _))| {
                let (id, host, port) = ((i + 1).to_string(), host.to_string(), controller.to_string());
                fill(
                    &spec.cluster.voter,
                    &[("node_id", &id), ("host", &host), ("controller_port", &port)],
                )
            })
            .collect::<Result<_>>()?;
        let voters = voters.join(&spec.cluster.voters_separator);
        let secret_dir = tempfile::Builder::new()
            .prefix(&spec.cluster.secret_dir_prefix)
            .tempdir()?;
        let (secret, secret_path) = write_cluster_secret(secret_dir.path())?;
        let secret_file = secret_path.display().to_string();
        let cluster_args = fill_all(
            &spec.cluster.args,
            &[("voters", &voters), ("secret_file", &secret_file)],
        )?;
        let mut nodes = Vec::with_capacity(size);
        for (i, (host, port, _, netns)) in endpoints.iter().enumerate() {
            let mut opts = NodeOptions {
                node_id: i as i32 + 1,
                host: Some(*host),
                netns: netns.clone(),
                ..NodeOptions::default()
            }
            .port(*port);
            opts.extra_args = cluster_args.clone();
            opts.ready_timeout = spec.cluster.ready_timeout();
            opts.report_on_drop = report_on_drop;
            for (k, v) in settings {
                opts = opts.set(k, v);
            }
            for (k, v) in per_node(i as i32 + 1) {
                opts = opts.set(&k, v);
            }
            customise(i as i32 + 1, &mut opts);
            nodes.push(SluiceNode::spawn(opts)?);
        }
        for node in &mut nodes {
            node.wait_ready()?;
        }
        // A node is ready once it lists itself, but may not yet have applied the others'
        // registrations: a client whose first Metadata comes from it is told a controller it
        // cannot find (librdkafka's admin requests then time out). The cluster is handed over
        // once every node lists every broker.
        let all: Vec<i32> = (1..=size as i32).collect();
        for node in &nodes {
            crate::clients::wait_until(spec.cluster.ready_timeout(), "every node to list every broker", || {
                let m = kafka_client::metadata_secured(node.addr(), node.client_security()).ok()?;
                let mut ids: Vec<i32> = m.brokers.iter().map(|b| b.node_id.0).collect();
                ids.sort();
                (ids == all).then_some(())
            })
            .with_context(|| format!("node {} of a fresh cluster", node.node_id()))?;
        }
        Ok(Cluster {
            nodes,
            controllers: endpoints
                .iter()
                .map(|(host, _, controller, _)| SocketAddr::new(*host, *controller))
                .collect(),
            secret,
            _secret_dir: secret_dir,
            net,
        })
    }

    /// The secret the nodes authenticate each other with (what their secret file holds).
    pub fn cluster_secret(&self) -> &str {
        &self.secret
    }

    /// The controller (metadata quorum) listener of node `id` (1-based).
    pub fn controller_addr(&self, id: i32) -> SocketAddr {
        self.controllers[id as usize - 1]
    }

    /// Every node's address, for `bootstrap.servers`.
    pub fn bootstrap(&self) -> String {
        self.nodes
            .iter()
            .map(SluiceNode::bootstrap)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The node with Kafka node id `id` (1-based).
    pub fn node(&mut self, id: i32) -> &mut SluiceNode {
        &mut self.nodes[id as usize - 1]
    }

    pub fn addr(&self, id: i32) -> SocketAddr {
        self.nodes[id as usize - 1].addr()
    }

    pub fn ids(&self) -> Vec<i32> {
        (1..=self.nodes.len() as i32).collect()
    }

    /// Reaches every node as `security` says from now on ([`SluiceNode::set_client_security`]):
    /// the harness's typed requests, Metadata and readiness probes after a restart.
    pub fn set_client_security(&mut self, security: &ClientSecurity) {
        for node in &mut self.nodes {
            node.set_client_security(security.clone());
        }
    }

    /// How the harness reaches node `id` (TLS, SASL login).
    pub fn client_security(&self, id: i32) -> &ClientSecurity {
        self.nodes[id as usize - 1].client_security()
    }

    /// Sends `request` at `version` to node `id`, over TLS and logged in as the node's
    /// [`NodeOptions::client_security`] says, and decodes the response.
    pub fn call<R: Request>(&self, id: i32, request: &R, version: i16, timeout: Duration) -> Result<R::Response> {
        let node = &self.nodes[id as usize - 1];
        kafka_client::call_secured(node.addr(), node.client_security(), request, version, timeout)
    }

    /// All-topics Metadata v12 from node `id` (over its secured listener, if it has one).
    pub fn metadata(&self, id: i32) -> Result<MetadataResponse> {
        let node = &self.nodes[id as usize - 1];
        kafka_client::metadata_secured(node.addr(), node.client_security())
    }

    /// The active controller (the metadata quorum's leader) as node `asking` reports it in
    /// DescribeQuorum, waiting until one is known. Metadata's controller id is not it: that
    /// names any broker the client can reach while the leader is not listed.
    pub fn controller(&self, asking: i32, timeout: Duration) -> Result<i32> {
        let topic = describe_quorum_request::TopicData::default()
            .with_topic_name(TopicName(StrBytes::from_static_str("__cluster_metadata")))
            .with_partitions(vec![describe_quorum_request::PartitionData::default()]);
        let request = DescribeQuorumRequest::default().with_topics(vec![topic]);
        crate::clients::wait_until(timeout, "a known controller", || {
            let response = self.call(asking, &request, 2, Duration::from_secs(5)).ok()?;
            let partition = response.topics.first()?.partitions.first()?;
            Some(partition.leader_id.0).filter(|id| *id > 0)
        })
    }

    /// Fails unless every node in `among` eventually reports the same brokers, controller and
    /// topic leadership; returns that common view.
    pub fn await_identical_metadata(&self, among: &[i32], timeout: Duration) -> Result<String> {
        let view = |id: i32| -> Result<String> {
            let m = self.metadata(id)?;
            let mut brokers: Vec<i32> = m.brokers.iter().map(|b| b.node_id.0).collect();
            brokers.sort();
            let mut topics: Vec<String> = m
                .topics
                .iter()
                .map(|t| {
                    let name = t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
                    let leaders: Vec<(i32, i32, i32)> = t
                        .partitions
                        .iter()
                        .map(|p| (p.partition_index, p.leader_id.0, p.leader_epoch))
                        .collect();
                    format!("{name} {} {leaders:?}", t.topic_id)
                })
                .collect();
            topics.sort();
            Ok(format!(
                "controller {} brokers {brokers:?} topics {topics:?}",
                m.controller_id.0
            ))
        };
        let deadline = std::time::Instant::now() + timeout;
        let mut last = Vec::new();
        while std::time::Instant::now() < deadline {
            last = among
                .iter()
                .map(|id| view(*id).unwrap_or_else(|e| format!("error: {e:#}")))
                .collect::<Vec<_>>();
            if last.iter().all(|v| v == &last[0] && !v.starts_with("error")) {
                return Ok(last.swap_remove(0));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        bail!("nodes {among:?} never agreed on metadata: {last:#?}")
    }

    /// Broker ids node `asking` lists in Metadata (fenced brokers are not listed).
    pub fn listed_brokers(&self, asking: i32) -> Result<Vec<i32>> {
        let m = self.metadata(asking).context("metadata")?;
        let mut ids: Vec<i32> = m.brokers.iter().map(|b| b.node_id.0).collect();
        ids.sort();
        Ok(ids)
    }

    /// Data directory of node `id` (partition logs live in `<data_dir>/<topic>-<partition>/`).
    pub fn data_dir(&self, id: i32) -> PathBuf {
        self.nodes[id as usize - 1].data_dir().to_path_buf()
    }

    /// Leader, epoch, replicas and ISR of every partition of `topic` as node `asking` reports
    /// them, sorted by partition.
    pub fn partitions(&self, asking: i32, topic: &str) -> Result<Vec<PartitionState>> {
        let m = self
            .metadata(asking)
            .with_context(|| format!("metadata from node {asking}"))?;
        let t = m
            .topics
            .iter()
            .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
            .with_context(|| format!("node {asking} does not list topic {topic}"))?;
        if t.error_code != 0 {
            bail!("node {asking}: topic {topic} has error code {}", t.error_code);
        }
        let mut partitions: Vec<PartitionState> = t
            .partitions
            .iter()
            .map(|p| PartitionState {
                partition: p.partition_index,
                error_code: p.error_code,
                leader: p.leader_id.0,
                leader_epoch: p.leader_epoch,
                replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
                isr: p.isr_nodes.iter().map(|b| b.0).collect(),
            })
            .collect();
        partitions.sort_by_key(|p| p.partition);
        Ok(partitions)
    }

    /// Partition 0 of `topic` as node `asking` reports it.
    pub fn partition_0(&self, asking: i32, topic: &str) -> Result<PartitionState> {
        self.partitions(asking, topic)?
            .into_iter()
            .next()
            .context("no partition 0")
    }

    /// Waits until every node in `among` reports partition 0 of `topic` as `accept` wants it;
    /// returns the first node's view. `what` names the condition for the timeout error.
    pub fn await_partition_0(
        &self,
        among: &[i32],
        topic: &str,
        what: &str,
        timeout: Duration,
        accept: impl Fn(&PartitionState) -> bool,
    ) -> Result<PartitionState> {
        crate::clients::wait_until(timeout, what, || {
            let views: Vec<PartitionState> = among
                .iter()
                .map(|id| self.partition_0(*id, topic).ok())
                .collect::<Option<_>>()?;
            views.iter().all(&accept).then(|| views[0].clone())
        })
    }

    /// The leader of `topic`/`partition` as node `asking` reports it, waiting until there is one.
    pub fn partition_leader(&self, asking: i32, topic: &str, partition: i32, timeout: Duration) -> Result<i32> {
        crate::clients::wait_until(timeout, &format!("a leader of {topic}-{partition}"), || {
            self.partitions(asking, topic)
                .ok()?
                .into_iter()
                .find(|p| p.partition == partition)
                .map(|p| p.leader)
                .filter(|leader| *leader >= 0)
        })
    }

    /// Waits until every node reports every partition of `topic` with all its replicas in the
    /// ISR and a leader among them; returns that view (as node 1 sees it).
    pub fn await_full_isr(&self, topic: &str, timeout: Duration) -> Result<Vec<PartitionState>> {
        self.await_full_isr_among(&self.ids(), topic, timeout)
    }

    /// [`Self::await_full_isr`], asking only the nodes in `among` (e.g. not a paused one).
    pub fn await_full_isr_among(&self, among: &[i32], topic: &str, timeout: Duration) -> Result<Vec<PartitionState>> {
        let deadline = Instant::now() + timeout;
        let mut last: Vec<String> = Vec::new();
        loop {
            let mut views = Vec::new();
            last.clear();
            for &id in among {
                match self.partitions(id, topic) {
                    Ok(ps) => {
                        let lagging: Vec<&PartitionState> = ps.iter().filter(|p| !p.has_full_isr()).collect();
                        if ps.is_empty() || !lagging.is_empty() {
                            last.push(format!("node {id}: not full: {lagging:?}"));
                        }
                        views.push(ps);
                    }
                    Err(e) => last.push(format!("node {id}: {e:#}")),
                }
            }
            if last.is_empty() {
                return Ok(views.swap_remove(0));
            }
            if Instant::now() >= deadline {
                bail!(
                    "{topic} did not return to full ISR within {timeout:?}:\n{}",
                    last.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// One partition as a node's Metadata response describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionState {
    pub partition: i32,
    pub error_code: i16,
    pub leader: i32,
    pub leader_epoch: i32,
    /// Assigned replicas, preferred leader first.
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

impl PartitionState {
    /// Every assigned replica is in the ISR and the leader is one of them.
    pub fn has_full_isr(&self) -> bool {
        let mut replicas = self.replicas.clone();
        let mut isr = self.isr.clone();
        replicas.sort();
        isr.sort();
        self.error_code == 0 && !replicas.is_empty() && replicas == isr && isr.contains(&self.leader)
    }

    /// The first assigned replica, which preferred-leader election moves leadership back to.
    pub fn preferred_leader(&self) -> Option<i32> {
        self.replicas.first().copied()
    }
}
