//! How a share-partition leader reads and stores its share-partitions' state (KIP-932's
//! `Persister`) at the group's coordinator: the leader of the group's `__consumer_offsets`
//! partition, called directly when that is this node and with ReadShareGroupState /
//! WriteShareGroupState over the inter-broker listener otherwise (`broker_channels.rs`, many
//! share-partitions of one group per request).
//!
//! A coordinator moving or loading is retried with a short back-off until the caller's
//! deadline; other refusals (a fenced state or leader epoch) are the caller's to act on.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    read_share_group_state_request as read_req, write_share_group_state_request as write_req,
};
use kafka_protocol::messages::{ReadShareGroupStateRequest, WriteShareGroupStateRequest};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::oneshot;
use uuid::Uuid;

use crate::broker_channels::{BrokerChannels, Exchange};
use crate::config::BrokerConfig;
use crate::controller::OFFSETS_TOPIC;
use crate::group::GroupMetadataManager;
use crate::metadata::MetadataStore;
use crate::replication::client::BrokerConnection;
use crate::security::Security;
use crate::share::state::{ShareState, StateBatch};
use crate::share::{ShareManager, SharePartitionKey, ShareSlot};

/// A refusal with what to tell the member.
pub type StateError = (ResponseError, String);

/// The Read/WriteShareGroupState version brokers of this build speak.
const STATE_API_VERSION: i16 = 0;
/// How long another broker may take to answer (a write waits for its ISR).
const STATE_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Back-off between tries while the coordinator moves or loads.
const RETRY_BACKOFF: Duration = Duration::from_millis(50);

pub struct SharePersister {
    node_id: i32,
    groups: Arc<GroupMetadataManager>,
    metadata: Arc<MetadataStore>,
    channels: BrokerChannels<QueuedStateOp>,
    /// How long a write may take, retries included (`offsets.commit.timeout.ms`).
    write_timeout: Duration,
}

impl SharePersister {
    pub fn new(
        config: Arc<BrokerConfig>,
        security: Arc<Security>,
        metadata: Arc<MetadataStore>,
        groups: Arc<GroupMetadataManager>,
    ) -> SharePersister {
        SharePersister {
            node_id: config.node_id,
            write_timeout: Duration::from_millis(config.offsets.commit_timeout_ms),
            channels: BrokerChannels::new(config, security, metadata.clone()),
            groups,
            metadata,
        }
    }

    /// The stored state of `key`, `None` if it has none yet; tries until `deadline`.
    pub async fn read(
        &self,
        key: &SharePartitionKey,
        leader_epoch: i32,
        deadline: tokio::time::Instant,
    ) -> Result<Option<ShareState>, StateError> {
        self.with_retries(key, StateOp::Read { leader_epoch }, deadline).await
    }

    /// Stores `state` for `key`; tries for up to `offsets.commit.timeout.ms`.
    pub async fn write(&self, key: &SharePartitionKey, state: ShareState) -> Result<(), StateError> {
        let deadline = tokio::time::Instant::now() + self.write_timeout;
        self.with_retries(key, StateOp::Write(state), deadline)
            .await
            .map(|_| ())
    }

    /// Stores `slot`'s state up to change `version` (or later ones): writers take turns, and
    /// one that finds its change already stored by an earlier turn is done at once.
    pub async fn store(&self, key: &SharePartitionKey, slot: &ShareSlot, version: u64) -> Result<(), StateError> {
        if slot.is_stored(version) {
            return Ok(());
        }
        let _turn = slot.writer_turn().await;
        if slot.is_stored(version) {
            return Ok(());
        }
        let (state, covered) = slot.snapshot();
        self.write(key, state).await?;
        slot.mark_stored(covered);
        Ok(())
    }

    /// `member_id`'s share session here closed (it left, or its connection went): the records
    /// it held are released and their delivery counts stored, then the group's
    /// share-partitions leave memory if it was the group's last session here.
    pub async fn close_session(&self, share: &ShareManager, group_id: &str, member_id: &str) {
        for (key, slot, version) in share.release_member(group_id, member_id) {
            if let Err((error, message)) = self.store(&key, &slot, version).await {
                tracing::debug!(group = %group_id, partition = key.partition, ?error, %message,
                    "could not store the delivery counts of a closed session's records; they are delivered again counted from the last stored state");
            }
        }
        share.forget_if_idle(group_id);
    }

    async fn with_retries(
        &self,
        key: &SharePartitionKey,
        op: StateOp,
        deadline: tokio::time::Instant,
    ) -> Result<Option<ShareState>, StateError> {
        loop {
            let outcome = self.once(key, op.clone()).await;
            match &outcome {
                Err((error, _)) if retriable(*error) && tokio::time::Instant::now() + RETRY_BACKOFF < deadline => {
                    tokio::time::sleep(RETRY_BACKOFF).await;
                }
                _ => return outcome,
            }
        }
    }

    async fn once(&self, key: &SharePartitionKey, op: StateOp) -> Result<Option<ShareState>, StateError> {
        let coordinator = self.coordinator(&key.group_id)?;
        if coordinator == self.node_id {
            return match op {
                StateOp::Read { .. } => self.groups.read_share_state(&key.group_id, key.topic_id, key.partition),
                StateOp::Write(state) => self
                    .groups
                    .write_share_state(&key.group_id, key.topic_id, key.partition, state)
                    .await
                    .map(|()| None),
            };
        }
        let (reply, answer) = oneshot::channel();
        self.channels
            .send(
                coordinator,
                QueuedStateOp {
                    key: key.clone(),
                    op,
                    reply,
                },
            )
            .await;
        answer
            .await
            .unwrap_or(Err((ResponseError::CoordinatorNotAvailable, String::new())))
    }

    /// The node leading the group's `__consumer_offsets` partition.
    fn coordinator(&self, group_id: &str) -> Result<i32, StateError> {
        let image = self.metadata.image();
        let index = self.groups.partition_for(group_id);
        let leader = image
            .topic(OFFSETS_TOPIC)
            .and_then(|t| t.partitions.get(usize::try_from(index).ok()?))
            .map_or(-1, |r| r.leader);
        if leader < 0 {
            return Err((
                ResponseError::CoordinatorNotAvailable,
                format!("The share group's coordinator ({OFFSETS_TOPIC} partition {index}) has no leader yet."),
            ));
        }
        Ok(leader)
    }
}

/// Errors that go away once the coordinator has moved or loaded.
fn retriable(error: ResponseError) -> bool {
    matches!(
        error,
        ResponseError::NotCoordinator
            | ResponseError::CoordinatorNotAvailable
            | ResponseError::CoordinatorLoadInProgress
            | ResponseError::RequestTimedOut
    )
}

#[derive(Clone)]
enum StateOp {
    Read { leader_epoch: i32 },
    Write(ShareState),
}

/// One read or write for another broker, and where its answer goes.
pub struct QueuedStateOp {
    key: SharePartitionKey,
    op: StateOp,
    reply: oneshot::Sender<Result<Option<ShareState>, StateError>>,
}

type Answers = HashMap<(Uuid, i32), Result<Option<ShareState>, StateError>>;

impl Exchange for QueuedStateOp {
    const PURPOSE: &'static str = "sluice-share-state";
    const MAX_PER_REQUEST: usize = 64;

    fn fail(self, error: ResponseError) {
        let _ = self.reply.send(Err((error, String::new())));
    }

    async fn exchange(connection: &mut BrokerConnection, batch: Vec<Self>) -> Result<(), (Vec<Self>, String)> {
        // One request per group and kind, in the order the first of each was queued.
        let mut requests: Vec<(String, bool)> = Vec::new();
        for item in &batch {
            let kind = (item.key.group_id.clone(), matches!(item.op, StateOp::Write(_)));
            if !requests.contains(&kind) {
                requests.push(kind);
            }
        }
        let mut answers: HashMap<(String, bool), Answers> = HashMap::new();
        for (group_id, write) in requests {
            let items = batch
                .iter()
                .filter(|i| i.key.group_id == group_id && matches!(i.op, StateOp::Write(_)) == write);
            let outcome = if write {
                write_request(connection, &group_id, items).await
            } else {
                read_request(connection, &group_id, items).await
            };
            match outcome {
                Ok(a) => {
                    answers.insert((group_id, write), a);
                }
                Err(e) => return Err((batch, e)),
            }
        }
        for item in batch {
            let kind = (item.key.group_id.clone(), matches!(item.op, StateOp::Write(_)));
            let answer = answers
                .get(&kind)
                .and_then(|a| a.get(&(item.key.topic_id, item.key.partition)))
                .cloned()
                .unwrap_or_else(|| {
                    Err((
                        ResponseError::UnknownServerError,
                        "The coordinator's answer left this share-partition out.".into(),
                    ))
                });
            let _ = item.reply.send(answer);
        }
        Ok(())
    }
}

/// The items' partitions by topic id, in first-seen order, each made by `partition`.
fn by_topic<'a, P>(
    items: impl Iterator<Item = &'a QueuedStateOp>,
    partition: impl Fn(&'a QueuedStateOp) -> Option<P>,
) -> Vec<(Uuid, Vec<P>)> {
    let mut topics: Vec<(Uuid, Vec<P>)> = Vec::new();
    for item in items {
        let Some(p) = partition(item) else { continue };
        match topics.iter_mut().find(|(id, _)| *id == item.key.topic_id) {
            Some((_, partitions)) => partitions.push(p),
            None => topics.push((item.key.topic_id, vec![p])),
        }
    }
    topics
}

/// A partition's answer: its error, else what `ok` makes of it.
fn answer(
    error_code: i16,
    error_message: Option<StrBytes>,
    ok: impl FnOnce() -> Option<ShareState>,
) -> Result<Option<ShareState>, StateError> {
    match ResponseError::try_from_code(error_code) {
        Some(e) => Err((e, error_message.map(|m| m.to_string()).unwrap_or_default())),
        None => Ok(ok()),
    }
}

async fn read_request<'a>(
    connection: &mut BrokerConnection,
    group_id: &str,
    items: impl Iterator<Item = &'a QueuedStateOp>,
) -> Result<Answers, String> {
    let topics = by_topic(items, |item| match item.op {
        StateOp::Read { leader_epoch } => Some(
            read_req::PartitionData::default()
                .with_partition(item.key.partition)
                .with_leader_epoch(leader_epoch),
        ),
        StateOp::Write(_) => None,
    });
    let request = ReadShareGroupStateRequest::default()
        .with_group_id(StrBytes::from_string(group_id.to_string()))
        .with_topics(
            topics
                .into_iter()
                .map(|(id, partitions)| {
                    read_req::ReadStateData::default()
                        .with_topic_id(id)
                        .with_partitions(partitions)
                })
                .collect(),
        );
    let response = connection
        .call(&request, STATE_API_VERSION, STATE_REQUEST_TIMEOUT)
        .await
        .map_err(|e| e.to_string())?;
    let mut answers = Answers::new();
    for topic in response.results {
        for p in topic.partitions {
            // A start offset of -1: nothing stored yet.
            let stored = (p.start_offset >= 0).then(|| ShareState {
                state_epoch: p.state_epoch,
                leader_epoch: -1,
                start_offset: p.start_offset,
                batches: p.state_batches.iter().map(StateBatch::from).collect(),
            });
            answers.insert(
                (topic.topic_id, p.partition),
                answer(p.error_code, p.error_message, || stored),
            );
        }
    }
    Ok(answers)
}

async fn write_request<'a>(
    connection: &mut BrokerConnection,
    group_id: &str,
    items: impl Iterator<Item = &'a QueuedStateOp>,
) -> Result<Answers, String> {
    let topics = by_topic(items, |item| match &item.op {
        StateOp::Write(state) => Some(
            write_req::PartitionData::default()
                .with_partition(item.key.partition)
                .with_state_epoch(state.state_epoch)
                .with_leader_epoch(state.leader_epoch)
                .with_start_offset(state.start_offset)
                .with_state_batches(state.batches.iter().map(Into::into).collect()),
        ),
        StateOp::Read { .. } => None,
    });
    let request = WriteShareGroupStateRequest::default()
        .with_group_id(StrBytes::from_string(group_id.to_string()))
        .with_topics(
            topics
                .into_iter()
                .map(|(id, partitions)| {
                    write_req::WriteStateData::default()
                        .with_topic_id(id)
                        .with_partitions(partitions)
                })
                .collect(),
        );
    let response = connection
        .call(&request, STATE_API_VERSION, STATE_REQUEST_TIMEOUT)
        .await
        .map_err(|e| e.to_string())?;
    let mut answers = Answers::new();
    for topic in response.results {
        for p in topic.partitions {
            answers.insert(
                (topic.topic_id, p.partition),
                answer(p.error_code, p.error_message, || None),
            );
        }
    }
    Ok(answers)
}
