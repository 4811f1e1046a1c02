//! Cluster metadata: records, the applied image, and the store that replicates changes through
//! the Raft quorum (`sluice-raft-meta`) and publishes each new image.
//!
//! A change is proposed as a [`MetadataCommand`] by any broker; the quorum orders it into the
//! metadata log, and every node applies it by running the controller's decision
//! ([`controller::decide`]) against its image, so every node reaches the same image and two
//! racing requests are decided in log order. The proposer gets the decision's outcome back
//! once the entry is applied locally, so a client is answered only after the change is
//! committed and visible on the broker it asked.
//!
//! Log entries and snapshots are prost messages in a versioned envelope (`codec.rs`,
//! `metadata.proto`). An entry or snapshot this build cannot read (a newer metadata version,
//! the JSON of earlier builds, damage) is never skipped: the quorum member stops with a
//! sentence saying what to do, because skipping would let nodes silently diverge.

pub mod acls;
pub mod codec;
pub mod image;
pub mod outcome;
pub mod records;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use parking_lot::Mutex;
use sluice_raft_meta::{ProposeError, Quorum, QuorumConfig, QuorumError, QuorumExit, QuorumStatus, StateMachine};
use tokio::sync::watch;
use uuid::Uuid;

use crate::cluster_id::new_cluster_id;
use crate::config::BrokerConfig;
use image::MetadataImage;
use outcome::{ApiError, Outcome};
use records::{MetadataCommand, MetadataRecord, Proposal};

/// The metadata log's topic name, as KRaft names it (DescribeQuorum asks for it).
pub const METADATA_TOPIC: &str = "__cluster_metadata";
/// Directory of the metadata log inside the data dir.
pub const METADATA_LOG_DIR: &str = "__cluster_metadata-0";
/// On-disk format version of the data dir; bumped when the layout changes incompatibly.
pub const DATA_DIR_VERSION: u32 = 2;
/// How long a metadata change may wait for the quorum before the client gets REQUEST_TIMED_OUT.
const PROPOSE_TIMEOUT: Duration = Duration::from_secs(10);
/// Outcomes kept for proposals whose waiter gave up, before they are dropped.
const MAX_UNCLAIMED_OUTCOMES: usize = 1024;

#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    #[error("{path}: {source}; check that the data directory exists and is writable")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("data directory {path} belongs to node {found}, not node {expected}; pass --node-id {found} or use another --data-dir")]
    NodeIdMismatch { path: PathBuf, found: i32, expected: i32 },
    #[error("data directory {path} belongs to cluster {found}, not {expected}; use this cluster's --cluster-id/--voters or a fresh --data-dir")]
    ClusterIdMismatch {
        path: PathBuf,
        found: String,
        expected: String,
    },
    #[error("data directory {path} has format version {found}; this build reads version {DATA_DIR_VERSION}. Use a matching sluice build or a fresh --data-dir")]
    VersionMismatch { path: PathBuf, found: u32 },
    #[error("{path} is unreadable ({reason}); restore it or start with a fresh --data-dir")]
    BadProperties { path: PathBuf, reason: String },
    #[error("the metadata quorum could not start: {0}")]
    Quorum(#[from] QuorumError),
}

/// Why a change was not committed.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error("{}", .0.message)]
    Refused(ApiError),
    #[error("{0}")]
    Quorum(#[from] ProposeError),
}

type Outcomes = Arc<Mutex<HashMap<u64, Result<Outcome, ApiError>>>>;

/// How a committed command becomes records and an outcome: the controller's `decide`, the same
/// on every node, run against the image as it stands when the command is applied.
pub type Decide = fn(&MetadataImage, &MetadataCommand) -> Result<(Vec<MetadataRecord>, Outcome), ApiError>;

pub struct MetadataStore {
    quorum: Quorum,
    published: watch::Receiver<Arc<MetadataImage>>,
    outcomes: Outcomes,
    node_id: i32,
    incarnation: Uuid,
}

pub use sluice_raft_meta::raft_id;

/// The node id of a quorum member's raft id (the quorum's own ids are node id + 1).
pub fn node_id_of(raft_id: u64) -> i32 {
    sluice_raft_meta::node_id_of(raft_id) as i32
}

impl MetadataStore {
    /// Checks the data dir's identity (`meta.properties`), starts this node's quorum member
    /// (which restores the snapshot and replays the metadata log) and returns once the local
    /// image reflects everything this node had committed.
    pub async fn open(
        config: &BrokerConfig,
        decide: Decide,
        tls: Option<sluice_raft_meta::QuorumTls>,
    ) -> Result<MetadataStore, MetadataError> {
        let cluster_id = load_or_create_identity(&config.data_dir, config.node_id, config.cluster_id.as_deref())?;
        let incarnation = Uuid::new_v4();
        let (sender, published) = watch::channel(Arc::new(MetadataImage::new(cluster_id.clone())));
        let outcomes = Outcomes::default();
        let state_machine = MetadataStateMachine {
            decide,
            image: MetadataImage::new(cluster_id.clone()),
            published: sender,
            outcomes: outcomes.clone(),
            node_id: config.node_id,
            incarnation,
        };
        let voters: BTreeMap<u64, String> = config
            .voters
            .iter()
            .map(|(id, addr)| (raft_id(*id), addr.clone()))
            .collect();
        let quorum_config = QuorumConfig {
            node_id: raft_id(config.node_id),
            voters,
            listen: config.controller_listen,
            data_dir: config.data_dir.join(METADATA_LOG_DIR),
            tick_ms: 100,
            election_tick: 10,
            heartbeat_tick: 2,
            snapshot_every_entries: 1000,
            cluster_id,
            secret: config.cluster_secret.clone(),
            tls,
        };
        let quorum = Quorum::start(quorum_config, state_machine).await?;
        let image = published.borrow().clone();
        tracing::info!(
            topics = image.topics.len(),
            brokers = image.brokers.len(),
            "metadata replayed"
        );
        Ok(MetadataStore {
            quorum,
            published,
            outcomes,
            node_id: config.node_id,
            incarnation,
        })
    }

    /// The current image; cheap (an `Arc` clone).
    pub fn image(&self) -> Arc<MetadataImage> {
        self.published.borrow().clone()
    }

    pub fn subscribe(&self) -> watch::Receiver<Arc<MetadataImage>> {
        self.published.clone()
    }

    pub fn quorum_status(&self) -> QuorumStatus {
        self.quorum.status()
    }

    /// The active controller's node id (the Raft leader), or -1 while there is none.
    pub fn controller_id(&self) -> i32 {
        self.quorum.status().leader_id.map_or(-1, node_id_of)
    }

    /// Proposes a command and waits until it is decided and applied on this node.
    pub async fn commit(&self, command: MetadataCommand) -> Result<(Arc<MetadataImage>, Outcome), CommitError> {
        let proposal = Proposal {
            proposer: self.node_id,
            incarnation: self.incarnation,
            command,
        };
        let data = codec::encode_proposal(&proposal);
        let index = self.quorum.propose(data, PROPOSE_TIMEOUT).await?;
        let outcome = self.outcomes.lock().remove(&index);
        match outcome {
            Some(Ok(Outcome::Refused(refused))) => Err(CommitError::Refused(refused)),
            Some(Ok(outcome)) => Ok((self.image(), outcome)),
            Some(Err(refused)) => Err(CommitError::Refused(refused)),
            // Applied, but by a restore that skipped our entry: it did happen; report success.
            None => Ok((self.image(), Outcome::Done)),
        }
    }

    /// Resolves when this node's quorum member stops, saying how (see `Quorum::stopped`).
    pub async fn quorum_stopped(&self) -> QuorumExit {
        self.quorum.stopped().await
    }

    pub async fn shutdown(self) {
        self.quorum.shutdown().await;
    }
}

/// The broker's side of the quorum: applies each committed proposal to the image.
struct MetadataStateMachine {
    image: MetadataImage,
    /// The controller's decision function (`controller::decide`), passed in by the broker so
    /// that the metadata layer sits below the controller.
    decide: Decide,
    published: watch::Sender<Arc<MetadataImage>>,
    outcomes: Outcomes,
    node_id: i32,
    incarnation: Uuid,
}

impl StateMachine for MetadataStateMachine {
    fn apply(&mut self, index: u64, data: &[u8]) -> Result<(), String> {
        let proposal = codec::decode_proposal(data).map_err(|e| e.refusal(&format!("metadata log entry {index}")))?;
        let decision = (self.decide)(&self.image, &proposal.command);
        let result = match decision {
            Ok((records, outcome)) => match self.image.check(&records) {
                Ok(()) => {
                    for record in &records {
                        // Checked above: a refusal now means the check and the image disagree,
                        // and this node stops rather than serve an image it cannot trust.
                        self.image
                            .try_apply(record)
                            .map_err(|broken| format!("metadata log entry {index} cannot be applied: {broken}; this is a bug in sluice, please report it with this node's log"))?;
                    }
                    if !records.is_empty() {
                        self.published.send_replace(Arc::new(self.image.clone()));
                    }
                    Ok(outcome)
                }
                // Decided identically on every node, so every node refuses it and the image
                // stays sound everywhere; the cluster carries on without this change.
                Err(broken) => {
                    tracing::error!(index, command = ?proposal.command, %broken,
                        "refusing a controller decision that would break a metadata invariant; this is a bug in sluice, please report it with this log");
                    Err(ApiError::new(
                        ResponseError::UnknownServerError,
                        format!("the controller refused its own decision because {broken}; this is a bug in sluice, please report it"),
                    ))
                }
            },
            Err(refused) => Err(refused),
        };
        if proposal.proposer == self.node_id && proposal.incarnation == self.incarnation {
            let mut outcomes = self.outcomes.lock();
            if outcomes.len() >= MAX_UNCLAIMED_OUTCOMES {
                let oldest = outcomes.keys().min().copied();
                oldest.map(|k| outcomes.remove(&k));
            }
            outcomes.insert(index, result);
        }
        Ok(())
    }

    fn snapshot(&self) -> Result<Vec<u8>, String> {
        Ok(codec::encode_image(&self.image))
    }

    fn restore(&mut self, data: &[u8]) -> Result<(), String> {
        if data.is_empty() {
            return Ok(()); // the bootstrap snapshot: no metadata yet
        }
        self.image = codec::decode_image(data).map_err(|e| e.refusal("the metadata snapshot"))?;
        self.published.send_replace(Arc::new(self.image.clone()));
        Ok(())
    }
}

/// Reads `meta.properties` (Kafka's file of the same name), or writes a new one. Returns the
/// cluster id: the stored one, which must match `wanted` when that is given.
fn load_or_create_identity(data_dir: &Path, node_id: i32, wanted: Option<&str>) -> Result<String, MetadataError> {
    let path = data_dir.join("meta.properties");
    let io = |source| MetadataError::Io {
        path: path.clone(),
        source,
    };
    std::fs::create_dir_all(data_dir).map_err(|source| MetadataError::Io {
        path: data_dir.to_path_buf(),
        source,
    })?;
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let get = |key: &str| {
                text.lines()
                    .filter_map(|l| l.split_once('='))
                    .find(|(k, _)| k.trim() == key)
                    .map(|(_, v)| v.trim().to_string())
            };
            let bad = |reason: &str| MetadataError::BadProperties {
                path: path.clone(),
                reason: reason.to_string(),
            };
            let version: u32 = get("version")
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| bad("no version"))?;
            if version != DATA_DIR_VERSION {
                return Err(MetadataError::VersionMismatch { path, found: version });
            }
            let found: i32 = get("node.id")
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| bad("no node.id"))?;
            if found != node_id {
                return Err(MetadataError::NodeIdMismatch {
                    path,
                    found,
                    expected: node_id,
                });
            }
            let cluster_id = get("cluster.id")
                .filter(|c| !c.is_empty())
                .ok_or_else(|| bad("no cluster.id"))?;
            match wanted {
                Some(w) if w != cluster_id => Err(MetadataError::ClusterIdMismatch {
                    path,
                    found: cluster_id,
                    expected: w.to_string(),
                }),
                _ => Ok(cluster_id),
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let cluster_id = wanted.map_or_else(new_cluster_id, str::to_string);
            let text = format!(
                "# Written by sluice; identifies this data directory.\nversion={DATA_DIR_VERSION}\nnode.id={node_id}\ncluster.id={cluster_id}\n"
            );
            crate::fs::write_atomically(&path, text.as_bytes()).map_err(io)?;
            Ok(cluster_id)
        }
        Err(e) => Err(io(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_is_created_then_checked() {
        let dir = tempfile::tempdir().unwrap();
        let cluster = load_or_create_identity(dir.path(), 1, None).unwrap();
        assert_eq!(cluster.len(), 22);
        assert_eq!(load_or_create_identity(dir.path(), 1, None).unwrap(), cluster);
        assert_eq!(load_or_create_identity(dir.path(), 1, Some(&cluster)).unwrap(), cluster);
        let err = load_or_create_identity(dir.path(), 2, None).unwrap_err();
        assert!(err.to_string().contains("--node-id 1"), "{err}");
        assert!(matches!(
            load_or_create_identity(dir.path(), 1, Some("other")),
            Err(MetadataError::ClusterIdMismatch { .. })
        ));
    }

    fn state_machine(node_id: i32, incarnation: Uuid) -> (MetadataStateMachine, watch::Receiver<Arc<MetadataImage>>) {
        let (published, rx) = watch::channel(Arc::new(MetadataImage::new("c".into())));
        let sm = MetadataStateMachine {
            decide: crate::controller::decide,
            image: MetadataImage::new("c".into()),
            published,
            outcomes: Outcomes::default(),
            node_id,
            incarnation,
        };
        (sm, rx)
    }

    fn entry(proposer: i32, incarnation: Uuid, command: MetadataCommand) -> Vec<u8> {
        codec::encode_proposal(&Proposal {
            proposer,
            incarnation,
            command,
        })
    }

    fn create(name: &str, id: u128) -> MetadataCommand {
        MetadataCommand::CreateTopic {
            topic: records::NewTopic {
                name: name.into(),
                num_partitions: 2,
                replication_factor: 1,
                replication_factor_defaulted: false,
                assignments: None,
                configs: BTreeMap::new(),
            },
            topic_id: Uuid::from_u128(id),
        }
    }

    /// A decision function with a bug: it moves t-0's leadership to broker 1 without bumping
    /// the leader epoch, or (for ElectLeaders) to broker 9, which is no replica at all.
    fn buggy_decide(image: &MetadataImage, command: &MetadataCommand) -> Result<(Vec<MetadataRecord>, Outcome), ApiError> {
        let Some(topic) = image.topic("t") else {
            return crate::controller::decide(image, command);
        };
        let p = &topic.partitions[0];
        let leader = match command {
            MetadataCommand::FenceBroker { .. } => 1,
            MetadataCommand::ElectLeaders { .. } => 9,
            _ => return crate::controller::decide(image, command),
        };
        let record = MetadataRecord::Partition {
            topic_id: topic.topic_id,
            partition: 0,
            replicas: p.replicas.to_vec(),
            isr: p.isr.to_vec(),
            leader,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch + 1,
            election: None,
        };
        Ok((vec![record], Outcome::Done))
    }

    #[test]
    fn a_decision_that_would_break_a_partition_invariant_is_refused_and_changes_nothing() {
        let me = Uuid::new_v4();
        let (mut sm, _published) = state_machine(1, me);
        sm.decide = buggy_decide;
        for (index, broker_id) in [(1, 1), (2, 2)] {
            let register = MetadataCommand::RegisterBroker {
                broker_id,
                incarnation_id: Uuid::nil(),
                endpoints: vec![],
                rack: None,
                replica_capacity: None,
                wait_for_previous_session: true,
            };
            sm.apply(index, &entry(1, me, register)).unwrap();
        }
        let mut topic = match create("t", 7) {
            MetadataCommand::CreateTopic { topic, .. } => topic,
            _ => unreachable!(),
        };
        topic.assignments = Some(vec![vec![2, 1]]);
        let create = MetadataCommand::CreateTopic {
            topic,
            topic_id: Uuid::from_u128(7),
        };
        sm.apply(3, &entry(1, me, create)).unwrap();
        let before = sm.image.clone();
        assert_eq!(before.topic("t").unwrap().partitions[0].leader, 2);

        sm.apply(4, &entry(1, me, MetadataCommand::FenceBroker { broker_id: 2 })).unwrap();
        let elect = MetadataCommand::ElectLeaders {
            election: records::ElectionType::Preferred,
            partitions: None,
        };
        sm.apply(5, &entry(1, me, elect)).unwrap();
        let outcomes = sm.outcomes.lock();
        for index in [4, 5] {
            let refused = outcomes[&index].as_ref().expect_err("the buggy decision is refused");
            assert_eq!(refused.error, ResponseError::UnknownServerError);
            assert!(refused.message.contains("breaks an invariant"), "{}", refused.message);
        }
        assert!(
            outcomes[&4].as_ref().unwrap_err().message.contains("without a new leader epoch"),
            "{:?}",
            outcomes[&4]
        );
        assert!(outcomes[&5].as_ref().unwrap_err().message.contains("leader 9 is not in the ISR"));
        let mut after = sm.image.clone();
        after.last_offset = before.last_offset;
        assert_eq!(after, before, "nothing of a refused decision is applied");
    }

    #[test]
    fn records_breaking_an_invariant_are_refused_by_check_and_by_try_apply() {
        let mut image = MetadataImage::new("c".into());
        let id = Uuid::from_u128(3);
        image.apply(&MetadataRecord::Topic {
            name: "t".into(),
            topic_id: id,
        });
        let partition = |leader, leader_epoch, partition_epoch| MetadataRecord::Partition {
            topic_id: id,
            partition: 0,
            replicas: vec![1, 2],
            isr: vec![1, 2],
            leader,
            leader_epoch,
            partition_epoch,
            election: None,
        };
        image.apply(&partition(1, 3, 5));
        let before = image.clone();
        for (bad, why) in [
            (partition(2, 3, 6), "without a new leader epoch"),
            (partition(1, 2, 6), "epochs do not go forward"),
            (partition(1, 3, 5), "epochs do not go forward"),
            (partition(3, 4, 6), "leader 3 is not in the ISR"),
        ] {
            assert!(image.check(std::slice::from_ref(&bad)).unwrap_err().contains(why), "{bad:?}");
            let err = image.try_apply(&bad).unwrap_err();
            assert!(err.contains(why), "{err}");
            let mut after = image.clone();
            after.last_offset = before.last_offset;
            assert_eq!(after, before, "a refused record changes nothing");
        }
        // Checked as a whole: the second change must follow the first, not the image.
        let both = [partition(2, 4, 6), partition(1, 4, 6)];
        assert!(image.check(&both).unwrap_err().contains("epochs do not go forward"));
        assert_eq!(image.check(&[partition(2, 4, 6), partition(1, 5, 7)]), Ok(()));
    }

    #[test]
    fn state_machine_applies_snapshots_and_restores_to_the_same_image() {
        let me = Uuid::new_v4();
        let (mut sm, published) = state_machine(1, me);
        let register = MetadataCommand::RegisterBroker {
            broker_id: 1,
            incarnation_id: Uuid::nil(),
            endpoints: vec![records::Endpoint::plaintext("h", 1)],
            rack: None,
            replica_capacity: None,
            wait_for_previous_session: true,
        };
        sm.apply(1, &entry(1, me, register)).unwrap();
        sm.apply(2, &entry(2, Uuid::nil(), create("a", 1))).unwrap();
        sm.apply(3, &entry(1, me, create("a", 2))).unwrap();
        assert_eq!(published.borrow().topic("a").unwrap().topic_id, Uuid::from_u128(1));
        // Only this process's own proposals keep an outcome: the racing creation lost.
        let outcomes = sm.outcomes.lock().clone();
        assert_eq!(outcomes.len(), 2);
        assert!(matches!(&outcomes[&3], Err(e) if e.error == kafka_protocol::error::ResponseError::TopicAlreadyExists));

        let (mut restored, restored_published) = state_machine(2, Uuid::new_v4());
        restored.restore(&sm.snapshot().unwrap()).unwrap();
        assert_eq!(restored.image, sm.image);
        assert_eq!(**restored_published.borrow(), sm.image);
    }

    #[test]
    fn a_registration_refused_while_the_previous_process_is_live_records_it_pending_and_is_refused() {
        use kafka_protocol::error::ResponseError::DuplicateBrokerRegistration;
        let me = Uuid::from_u128(2);
        let (mut sm, published) = state_machine(1, me);
        let register = |incarnation_id| MetadataCommand::RegisterBroker {
            broker_id: 1,
            incarnation_id,
            endpoints: vec![],
            rack: None,
            replica_capacity: None,
            wait_for_previous_session: true,
        };
        let previous = Uuid::from_u128(1);
        sm.apply(1, &entry(1, previous, register(previous))).unwrap();
        sm.apply(2, &entry(1, me, register(me))).unwrap();
        let pending_at = published.borrow().last_offset;
        sm.apply(3, &entry(1, me, register(me))).unwrap();
        let outcomes = sm.outcomes.lock().clone();
        assert!(
            matches!(&outcomes[&2], Ok(Outcome::Refused(e)) if e.error == DuplicateBrokerRegistration),
            "{outcomes:?}"
        );
        assert!(matches!(&outcomes[&3], Err(e) if e.error == DuplicateBrokerRegistration));
        let image = published.borrow().clone();
        assert_eq!(image.last_offset, pending_at, "a retry records nothing");
        let broker = &image.brokers[&1];
        assert_eq!(
            (broker.incarnation_id, broker.pending_incarnation),
            (previous, Some(me))
        );
        assert!(broker.is_live(), "the previous process stays registered until fenced");
    }

    #[test]
    fn unreadable_entries_and_snapshots_are_refused_with_what_to_do_never_skipped() {
        let (mut sm, published) = state_machine(1, Uuid::new_v4());
        sm.apply(1, &entry(2, Uuid::nil(), create("a", 1))).unwrap();
        let before = sm.image.clone();

        let newer = codec::pb::Envelope {
            metadata_version: codec::METADATA_VERSION + 6,
            payload: b"a format from the future".to_vec(),
        };
        let err = sm.apply(42, &prost::Message::encode_to_vec(&newer)).unwrap_err();
        assert_eq!(
            err,
            format!(
                "metadata log entry 42 was written with metadata version {}, but this build of sluice understands versions up to {}: upgrade sluice on this node to the version the rest of the cluster runs",
                codec::METADATA_VERSION + 6,
                codec::METADATA_VERSION
            )
        );
        // An entry as earlier builds wrote it (serde JSON).
        let old_json = br#"{"proposer":1,"incarnation":"00000000-0000-0000-0000-000000000000","command":{"FenceBroker":{"broker_id":1}}}"#;
        let err = sm.apply(43, old_json).unwrap_err();
        assert!(
            err.starts_with("metadata log entry 43 was written by an earlier Sluice build in an unversioned format"),
            "{err}"
        );
        assert!(
            err.ends_with("start this node with a fresh data directory (or use the previous build)"),
            "{err}"
        );
        let err = sm.apply(44, b"\x08\x01\x12\x03garbage").unwrap_err();
        assert!(
            err.starts_with(&format!(
                "metadata log entry 44 does not decode as metadata version {}",
                codec::METADATA_VERSION
            )),
            "{err}"
        );

        let old_snapshot = br#"{"cluster_id":"c","last_offset":3}"#;
        let err = sm.restore(old_snapshot).unwrap_err();
        assert!(
            err.starts_with("the metadata snapshot was written by an earlier Sluice build"),
            "{err}"
        );
        assert_eq!(sm.image, before, "nothing refused was applied");
        assert_eq!(**published.borrow(), before);
    }

    #[test]
    fn raft_ids_are_non_zero() {
        assert_eq!(raft_id(0), 1);
        assert_eq!(node_id_of(raft_id(7)), 7);
    }
}
