//! The metadata log's on-disk and on-wire format: prost messages (`metadata.proto`, beside this
//! file) wrapped in a versioned envelope, and their conversion to and from the domain types in
//! [`records`](super::records) and [`image`](super::image).
//!
//! Encoding never fails. Decoding checks everything the domain types rely on (the version,
//! required fields, enum values, UUID lengths, integer ranges) and says what was wrong, because
//! a metadata entry that cannot be read must stop the node rather than be skipped: a node that
//! skipped an entry its peers applied would silently serve different metadata.
//!
//! Long because every record, command and snapshot field is converted by hand, both ways, with
//! the decoding checks; the tests at the end round-trip every record and command and a snapshot,
//! and check the refusals.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Display;
use std::sync::Arc;

use prost::Message;
use uuid::Uuid;

use super::acls::{
    AclBinding, AclFilter, AclOperation, AclPermission, AclTable, PatternFilter, PatternType, ResourceType,
};
use super::image::{BrokerRegistration, MetadataImage, PartitionRegistration, Reassignment, TopicImage};
use super::records::{
    AlterOp, ConfigResource, ElectionReason, ElectionTrigger, ElectionType, Endpoint, IsrChangeRequest, LeaderElection,
    MetadataCommand, MetadataRecord, NewTopic, Proposal, QuotaEntity, QuotaName, QuotaValue, ScramCredential,
    ScramMechanism,
};

/// The prost types generated from `metadata.proto` by `build.rs`.
#[allow(clippy::all, missing_docs)]
pub mod pb {
    include!(concat!(env!("OUT_DIR"), "/sluice.metadata.rs"));
}

/// The metadata format this build writes, and the newest it reads. Bump it whenever
/// `metadata.proto` changes in a way an older build would misread, so that the older build
/// refuses the new entries instead of misapplying them.
/// Version 2 added client quotas (a command, a record and an image field a version-1 build
/// would silently drop from a snapshot).
/// Version 3 added brokers' replica capacity to registrations: a version-2 build would drop it
/// and then decide CreateTopics/CreatePartitions without the capacity check.
/// Version 4 fences a restarted broker's previous incarnation before its new one registers:
/// registrations that wait for the previous session, the record of a pending incarnation (an
/// image field too), and unfencing by the broker's own incarnation. A version-3 build would
/// accept such a registration at once and unfence the previous incarnation.
/// Version 5 added SCRAM credentials and ACLs (commands, records and image fields a version-4
/// build would drop, letting users in with passwords since changed and ignoring ACLs).
/// Version 6 added finalized feature levels (UpdateFeatures: a command, a record and image
/// fields a version-5 build would drop, answering ApiVersions with its own static levels).
/// Version 7 added group configs (KIP-848/KIP-932: a command, a config resource kind and an
/// image field a version-6 build would refuse or silently drop from a snapshot).
/// Version 8 added AlterPartitions (a leader's ISR changes to many partitions in one entry), a
/// command a version-7 build would refuse.
pub const METADATA_VERSION: u32 = 8;

/// Why metadata bytes were refused. Displayed after what was refused ("metadata log entry 7 ...").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("was written with metadata version {found}, but this build of sluice understands versions up to {METADATA_VERSION}")]
    UnknownVersion { found: u32 },
    #[error("was written by an earlier Sluice build in an unversioned format that this build no longer reads")]
    Unversioned,
    #[error("does not decode as metadata version {version}: {detail}")]
    Malformed { version: u32, detail: String },
}

impl DecodeError {
    /// The sentence an operator reads when the node stops: what was refused, why, what to do.
    pub fn refusal(&self, what: &str) -> String {
        let advice = match self {
            DecodeError::UnknownVersion { .. } => {
                "upgrade sluice on this node to the version the rest of the cluster runs"
            }
            DecodeError::Unversioned => {
                "start this node with a fresh data directory (or use the previous build)"
            }
            DecodeError::Malformed { .. } => {
                "the metadata on this node is damaged or was written by an incompatible build; restore the data directory from a backup, or run the sluice build that wrote it"
            }
        };
        format!("{what} {self}: {advice}")
    }
}

/// A log entry: the proposal, enveloped at [`METADATA_VERSION`].
pub fn encode_proposal(proposal: &Proposal) -> Vec<u8> {
    seal(&proposal_to_pb(proposal))
}

pub fn decode_proposal(data: &[u8]) -> Result<Proposal, DecodeError> {
    let (version, proposal) = open::<pb::Proposal>(data)?;
    proposal_from_pb(proposal).map_err(|detail| DecodeError::Malformed { version, detail })
}

/// A snapshot: the whole image, enveloped at [`METADATA_VERSION`].
pub fn encode_image(image: &MetadataImage) -> Vec<u8> {
    seal(&image_to_pb(image))
}

pub fn decode_image(data: &[u8]) -> Result<MetadataImage, DecodeError> {
    let (version, image) = open::<pb::Image>(data)?;
    image_from_pb(image).map_err(|detail| DecodeError::Malformed { version, detail })
}

/// One record, enveloped like a log entry. Records are derived from commands at apply time and
/// not stored today; the format is fixed here so that a record log (as KRaft keeps) can adopt it.
pub fn encode_record(record: &MetadataRecord) -> Vec<u8> {
    seal(&record_to_pb(record))
}

pub fn decode_record(data: &[u8]) -> Result<MetadataRecord, DecodeError> {
    let (version, record) = open::<pb::MetadataRecord>(data)?;
    record_from_pb(record).map_err(|detail| DecodeError::Malformed { version, detail })
}

fn seal(payload: &impl Message) -> Vec<u8> {
    pb::Envelope {
        metadata_version: METADATA_VERSION,
        payload: payload.encode_to_vec(),
    }
    .encode_to_vec()
}

/// Reads the envelope, checks its version, and decodes the payload as `M`.
fn open<M: Message + Default>(data: &[u8]) -> Result<(u32, M), DecodeError> {
    // Earlier builds wrote serde JSON objects; an envelope starts with its version's tag (0x08).
    if data.first() == Some(&b'{') {
        return Err(DecodeError::Unversioned);
    }
    let malformed = |version, detail: String| DecodeError::Malformed { version, detail };
    let envelope = pb::Envelope::decode(data).map_err(|e| malformed(METADATA_VERSION, format!("envelope: {e}")))?;
    let version = envelope.metadata_version;
    if version == 0 {
        return Err(malformed(version, "the envelope carries no metadata version".into()));
    }
    if version > METADATA_VERSION {
        return Err(DecodeError::UnknownVersion { found: version });
    }
    let payload = M::decode(envelope.payload.as_slice()).map_err(|e| malformed(version, format!("payload: {e}")))?;
    Ok((version, payload))
}

type Decoded<T> = Result<T, String>;

fn required<T>(field: &str, value: Option<T>) -> Decoded<T> {
    value.ok_or_else(|| format!("{field} is missing"))
}

fn uuid(field: &str, bytes: &[u8]) -> Decoded<Uuid> {
    Uuid::from_slice(bytes).map_err(|_| format!("{field} is {} bytes, not a 16-byte UUID", bytes.len()))
}

fn in_range<T: TryFrom<i32>>(field: &str, value: i32) -> Decoded<T>
where
    T::Error: Display,
{
    T::try_from(value).map_err(|e| format!("{field} {value} is out of range: {e}"))
}

fn proposal_to_pb(p: &Proposal) -> pb::Proposal {
    pb::Proposal {
        proposer: p.proposer,
        incarnation: p.incarnation.as_bytes().to_vec(),
        command: Some(command_to_pb(&p.command)),
    }
}

fn proposal_from_pb(p: pb::Proposal) -> Decoded<Proposal> {
    Ok(Proposal {
        proposer: p.proposer,
        incarnation: uuid("proposal incarnation", &p.incarnation)?,
        command: command_from_pb(required("proposal command", p.command)?)?,
    })
}

fn endpoints_to_pb(endpoints: &[Endpoint]) -> Vec<pb::Endpoint> {
    endpoints
        .iter()
        .map(|e| pb::Endpoint {
            host: e.host.clone(),
            port: e.port,
            listener: e.listener.clone(),
        })
        .collect()
}

fn endpoints_from_pb(endpoints: Vec<pb::Endpoint>) -> Vec<Endpoint> {
    endpoints
        .into_iter()
        .map(|e| match e.listener.is_empty() {
            true => Endpoint::plaintext(e.host, e.port),
            false => Endpoint {
                listener: e.listener,
                host: e.host,
                port: e.port,
            },
        })
        .collect()
}

fn register_to_pb(
    broker_id: i32,
    incarnation_id: &Uuid,
    endpoints: &[Endpoint],
    rack: &Option<String>,
    replica_capacity: Option<u32>,
    wait_for_previous_session: bool,
) -> pb::RegisterBroker {
    pb::RegisterBroker {
        broker_id,
        incarnation_id: incarnation_id.as_bytes().to_vec(),
        endpoints: endpoints_to_pb(endpoints),
        rack: rack.clone(),
        replica_capacity,
        wait_for_previous_session,
    }
}

/// The fields shared by the RegisterBroker command and record (the record ignores the last).
struct Registration {
    broker_id: i32,
    incarnation_id: Uuid,
    endpoints: Vec<Endpoint>,
    rack: Option<String>,
    replica_capacity: Option<u32>,
    wait_for_previous_session: bool,
}

fn register_from_pb(r: pb::RegisterBroker) -> Decoded<Registration> {
    Ok(Registration {
        broker_id: r.broker_id,
        incarnation_id: uuid("register_broker incarnation_id", &r.incarnation_id)?,
        endpoints: endpoints_from_pb(r.endpoints),
        rack: r.rack,
        replica_capacity: r.replica_capacity,
        wait_for_previous_session: r.wait_for_previous_session,
    })
}

fn broker_incarnation_to_pb(broker_id: i32, incarnation_id: Option<&Uuid>) -> pb::BrokerIncarnation {
    pb::BrokerIncarnation {
        broker_id,
        incarnation_id: incarnation_id.map_or_else(Vec::new, |id| id.as_bytes().to_vec()),
    }
}

/// A broker incarnation's UUID, or `None` when the field is empty (entries before version 4).
fn optional_uuid(field: &str, bytes: &[u8]) -> Decoded<Option<Uuid>> {
    match bytes.is_empty() {
        true => Ok(None),
        false => uuid(field, bytes).map(Some),
    }
}

fn assignments_to_pb(assignments: &Option<Vec<Vec<i32>>>) -> Option<pb::Assignments> {
    assignments.as_ref().map(|partitions| pb::Assignments {
        partitions: partitions
            .iter()
            .map(|replicas| pb::Replicas {
                broker_ids: replicas.clone(),
            })
            .collect(),
    })
}

fn assignments_from_pb(assignments: Option<pb::Assignments>) -> Option<Vec<Vec<i32>>> {
    assignments.map(|a| a.partitions.into_iter().map(|r| r.broker_ids).collect())
}

fn alter_op_to_pb(op: AlterOp) -> pb::AlterOp {
    match op {
        AlterOp::Set => pb::AlterOp::Set,
        AlterOp::Delete => pb::AlterOp::Delete,
        AlterOp::Append => pb::AlterOp::Append,
        AlterOp::Subtract => pb::AlterOp::Subtract,
    }
}

fn alter_op_from_pb(code: i32) -> Decoded<AlterOp> {
    match pb::AlterOp::try_from(code) {
        Ok(pb::AlterOp::Set) => Ok(AlterOp::Set),
        Ok(pb::AlterOp::Delete) => Ok(AlterOp::Delete),
        Ok(pb::AlterOp::Append) => Ok(AlterOp::Append),
        Ok(pb::AlterOp::Subtract) => Ok(AlterOp::Subtract),
        Ok(pb::AlterOp::Unspecified) => Err("alter config op is missing".into()),
        Err(_) => Err(format!("alter config op {code} is unknown")),
    }
}

fn alter_ops_to_pb(ops: &[(String, AlterOp, Option<String>)]) -> Vec<pb::AlterConfigOp> {
    ops.iter()
        .map(|(name, op, value)| pb::AlterConfigOp {
            name: name.clone(),
            op: alter_op_to_pb(*op).into(),
            value: value.clone(),
        })
        .collect()
}

fn alter_ops_from_pb(ops: Vec<pb::AlterConfigOp>) -> Decoded<Vec<(String, AlterOp, Option<String>)>> {
    ops.into_iter()
        .map(|op| Ok((op.name, alter_op_from_pb(op.op)?, op.value)))
        .collect()
}

fn election_type_to_pb(election: ElectionType) -> pb::ElectionType {
    match election {
        ElectionType::Preferred => pb::ElectionType::Preferred,
        ElectionType::Unclean => pb::ElectionType::Unclean,
    }
}

fn election_type_from_pb(code: i32) -> Decoded<ElectionType> {
    match pb::ElectionType::try_from(code) {
        Ok(pb::ElectionType::Preferred) => Ok(ElectionType::Preferred),
        Ok(pb::ElectionType::Unclean) => Ok(ElectionType::Unclean),
        Ok(pb::ElectionType::Unspecified) => Err("election type is missing".into()),
        Err(_) => Err(format!("election type {code} is unknown")),
    }
}

fn command_to_pb(command: &MetadataCommand) -> pb::MetadataCommand {
    use pb::metadata_command::Command as C;
    let command = match command {
        MetadataCommand::RegisterBroker {
            broker_id,
            incarnation_id,
            endpoints,
            rack,
            replica_capacity,
            wait_for_previous_session,
        } => C::RegisterBroker(register_to_pb(
            *broker_id,
            incarnation_id,
            endpoints,
            rack,
            *replica_capacity,
            *wait_for_previous_session,
        )),
        MetadataCommand::FenceBroker { broker_id } => C::FenceBroker(pb::BrokerId { broker_id: *broker_id }),
        MetadataCommand::UnfenceBroker {
            broker_id,
            incarnation_id,
        } => C::UnfenceBroker(broker_incarnation_to_pb(*broker_id, incarnation_id.as_ref())),
        MetadataCommand::CreateTopic { topic, topic_id } => C::CreateTopic(pb::CreateTopic {
            topic: Some(pb::NewTopic {
                name: topic.name.clone(),
                num_partitions: topic.num_partitions,
                replication_factor: i32::from(topic.replication_factor),
                replication_factor_defaulted: topic.replication_factor_defaulted,
                assignments: assignments_to_pb(&topic.assignments),
                configs: topic.configs.clone(),
            }),
            topic_id: topic_id.as_bytes().to_vec(),
        }),
        MetadataCommand::AllocateProducerIds { broker_id } => {
            C::AllocateProducerIds(pb::BrokerId { broker_id: *broker_id })
        }
        MetadataCommand::DeleteTopic { name, topic_id } => C::DeleteTopic(pb::DeleteTopic {
            name: name.clone(),
            topic_id: topic_id.as_bytes().to_vec(),
        }),
        MetadataCommand::CreatePartitions {
            name,
            count,
            assignments,
        } => C::CreatePartitions(pb::CreatePartitions {
            name: name.clone(),
            count: *count,
            assignments: assignments_to_pb(assignments),
        }),
        MetadataCommand::AlterTopicConfigs { name, ops, list_bases } => C::AlterTopicConfigs(pb::AlterTopicConfigs {
            name: name.clone(),
            ops: alter_ops_to_pb(ops),
            list_bases: list_bases.clone(),
        }),
        MetadataCommand::AlterBrokerConfigs { broker_id, ops } => C::AlterBrokerConfigs(pb::AlterBrokerConfigs {
            broker_id: *broker_id,
            ops: alter_ops_to_pb(ops),
        }),
        MetadataCommand::AlterGroupConfigs { group_id, ops } => C::AlterGroupConfigs(pb::AlterGroupConfigs {
            group_id: group_id.clone(),
            ops: alter_ops_to_pb(ops),
        }),
        MetadataCommand::AlterPartition {
            topic_id,
            partition,
            leader_id,
            leader_epoch,
            partition_epoch,
            new_isr,
        } => C::AlterPartition(pb::AlterPartition {
            topic_id: topic_id.as_bytes().to_vec(),
            partition: *partition,
            leader_id: *leader_id,
            leader_epoch: *leader_epoch,
            partition_epoch: *partition_epoch,
            new_isr: new_isr.clone(),
        }),
        MetadataCommand::AlterPartitions { leader_id, changes } => C::AlterPartitions(pb::AlterPartitions {
            leader_id: *leader_id,
            changes: changes
                .iter()
                .map(|c| pb::IsrChange {
                    topic_id: c.topic_id.as_bytes().to_vec(),
                    partition: c.partition,
                    leader_epoch: c.leader_epoch,
                    partition_epoch: c.partition_epoch,
                    new_isr: c.new_isr.clone(),
                })
                .collect(),
        }),
        MetadataCommand::ControlledShutdown {
            broker_id,
            incarnation_id,
        } => C::ControlledShutdown(pb::ControlledShutdown {
            broker_id: *broker_id,
            incarnation_id: incarnation_id.as_bytes().to_vec(),
        }),
        MetadataCommand::ElectPreferredLeaders => C::ElectPreferredLeaders(pb::Empty {}),
        MetadataCommand::ReassignPartition {
            name,
            partition,
            target,
        } => C::ReassignPartition(pb::ReassignPartition {
            name: name.clone(),
            partition: *partition,
            cancel: target.is_none(),
            target: target.clone().unwrap_or_default(),
        }),
        MetadataCommand::ElectLeaders { election, partitions } => C::ElectLeaders(pb::ElectLeaders {
            election_type: election_type_to_pb(*election).into(),
            partitions: partitions.as_ref().map(|topics| pb::PartitionSelection {
                topics: topics
                    .iter()
                    .map(|(topic, partitions)| pb::TopicPartitions {
                        topic: topic.clone(),
                        partitions: partitions.clone(),
                    })
                    .collect(),
            }),
        }),
        MetadataCommand::AlterClientQuotas { entity, ops } => C::AlterClientQuotas(pb::AlterClientQuotas {
            entity: Some(quota_entity_to_pb(entity)),
            ops: ops
                .iter()
                .map(|(key, value)| pb::QuotaOp {
                    key: key.clone(),
                    value: value.map(|v| v.0),
                })
                .collect(),
        }),
        MetadataCommand::AlterScramCredentials {
            deletions,
            upsertions,
            only_if_absent,
        } => C::AlterScramCredentials(pb::AlterScramCredentials {
            deletions: deletions
                .iter()
                .map(|(user, mechanism)| user_mechanism_to_pb(user, *mechanism))
                .collect(),
            upsertions: upsertions.iter().map(scram_credential_to_pb).collect(),
            only_if_absent: *only_if_absent,
        }),
        MetadataCommand::CreateAcls { acls } => C::CreateAcls(pb::CreateAcls {
            acls: acls.iter().map(|(id, binding)| acl_entry_to_pb(id, binding)).collect(),
        }),
        MetadataCommand::DeleteAcls { filters } => C::DeleteAcls(pb::DeleteAcls {
            filters: filters.iter().map(acl_filter_to_pb).collect(),
        }),
        MetadataCommand::UpdateFeatures { updates } => C::UpdateFeatures(pb::UpdateFeatures {
            updates: updates.iter().map(|(name, level)| feature_level_to_pb(name, *level)).collect(),
        }),
    };
    pb::MetadataCommand { command: Some(command) }
}

fn command_from_pb(command: pb::MetadataCommand) -> Decoded<MetadataCommand> {
    use pb::metadata_command::Command as C;
    // A command this build does not know decodes as an unknown field, so as missing.
    Ok(
        match required(
            "command (absent, or of a kind this build does not know)",
            command.command,
        )? {
            C::RegisterBroker(r) => {
                let r = register_from_pb(r)?;
                MetadataCommand::RegisterBroker {
                    broker_id: r.broker_id,
                    incarnation_id: r.incarnation_id,
                    endpoints: r.endpoints,
                    rack: r.rack,
                    replica_capacity: r.replica_capacity,
                    wait_for_previous_session: r.wait_for_previous_session,
                }
            }
            C::FenceBroker(b) => MetadataCommand::FenceBroker { broker_id: b.broker_id },
            C::UnfenceBroker(b) => MetadataCommand::UnfenceBroker {
                broker_id: b.broker_id,
                incarnation_id: optional_uuid("unfence_broker incarnation_id", &b.incarnation_id)?,
            },
            C::CreateTopic(c) => {
                let topic = required("create_topic topic", c.topic)?;
                MetadataCommand::CreateTopic {
                    topic: NewTopic {
                        name: topic.name,
                        num_partitions: topic.num_partitions,
                        replication_factor: in_range("create_topic replication_factor", topic.replication_factor)?,
                        replication_factor_defaulted: topic.replication_factor_defaulted,
                        assignments: assignments_from_pb(topic.assignments),
                        configs: topic.configs,
                    },
                    topic_id: uuid("create_topic topic_id", &c.topic_id)?,
                }
            }
            C::AllocateProducerIds(b) => MetadataCommand::AllocateProducerIds { broker_id: b.broker_id },
            C::DeleteTopic(d) => MetadataCommand::DeleteTopic {
                name: d.name,
                topic_id: uuid("delete_topic topic_id", &d.topic_id)?,
            },
            C::CreatePartitions(c) => MetadataCommand::CreatePartitions {
                name: c.name,
                count: c.count,
                assignments: assignments_from_pb(c.assignments),
            },
            C::AlterTopicConfigs(a) => MetadataCommand::AlterTopicConfigs {
                name: a.name,
                ops: alter_ops_from_pb(a.ops)?,
                list_bases: a.list_bases,
            },
            C::AlterBrokerConfigs(a) => MetadataCommand::AlterBrokerConfigs {
                broker_id: a.broker_id,
                ops: alter_ops_from_pb(a.ops)?,
            },
            C::AlterGroupConfigs(a) => MetadataCommand::AlterGroupConfigs {
                group_id: a.group_id,
                ops: alter_ops_from_pb(a.ops)?,
            },
            C::AlterPartition(a) => MetadataCommand::AlterPartition {
                topic_id: uuid("alter_partition topic_id", &a.topic_id)?,
                partition: a.partition,
                leader_id: a.leader_id,
                leader_epoch: a.leader_epoch,
                partition_epoch: a.partition_epoch,
                new_isr: a.new_isr,
            },
            C::AlterPartitions(a) => MetadataCommand::AlterPartitions {
                leader_id: a.leader_id,
                changes: a
                    .changes
                    .into_iter()
                    .map(|c| {
                        Ok(IsrChangeRequest {
                            topic_id: uuid("alter_partitions topic_id", &c.topic_id)?,
                            partition: c.partition,
                            leader_epoch: c.leader_epoch,
                            partition_epoch: c.partition_epoch,
                            new_isr: c.new_isr,
                        })
                    })
                    .collect::<Decoded<_>>()?,
            },
            C::ControlledShutdown(c) => MetadataCommand::ControlledShutdown {
                broker_id: c.broker_id,
                incarnation_id: uuid("controlled_shutdown incarnation_id", &c.incarnation_id)?,
            },
            C::ElectPreferredLeaders(pb::Empty {}) => MetadataCommand::ElectPreferredLeaders,
            C::ReassignPartition(r) => MetadataCommand::ReassignPartition {
                name: r.name,
                partition: r.partition,
                target: (!r.cancel).then_some(r.target),
            },
            C::ElectLeaders(e) => MetadataCommand::ElectLeaders {
                election: election_type_from_pb(e.election_type)?,
                partitions: e
                    .partitions
                    .map(|selection| selection.topics.into_iter().map(|t| (t.topic, t.partitions)).collect()),
            },
            C::AlterClientQuotas(a) => MetadataCommand::AlterClientQuotas {
                entity: quota_entity_from_pb(required("alter_client_quotas entity", a.entity)?),
                ops: a.ops.into_iter().map(|op| (op.key, op.value.map(QuotaValue))).collect(),
            },
            C::AlterScramCredentials(a) => MetadataCommand::AlterScramCredentials {
                deletions: a
                    .deletions
                    .into_iter()
                    .map(user_mechanism_from_pb)
                    .collect::<Decoded<_>>()?,
                upsertions: a
                    .upsertions
                    .into_iter()
                    .map(scram_credential_from_pb)
                    .collect::<Decoded<_>>()?,
                only_if_absent: a.only_if_absent,
            },
            C::CreateAcls(c) => MetadataCommand::CreateAcls {
                acls: c.acls.into_iter().map(acl_entry_from_pb).collect::<Decoded<_>>()?,
            },
            C::DeleteAcls(d) => MetadataCommand::DeleteAcls {
                filters: d.filters.into_iter().map(acl_filter_from_pb).collect::<Decoded<_>>()?,
            },
            C::UpdateFeatures(u) => MetadataCommand::UpdateFeatures {
                updates: u.updates.into_iter().map(feature_level_from_pb).collect::<Decoded<_>>()?,
            },
        },
    )
}

fn feature_level_to_pb(name: &str, level: i16) -> pb::FeatureLevel {
    pb::FeatureLevel {
        name: name.to_string(),
        level: i32::from(level),
    }
}

fn feature_level_from_pb(f: pb::FeatureLevel) -> Decoded<(String, i16)> {
    let level = i16::try_from(f.level).map_err(|_| format!("feature {} has level {} out of range", f.name, f.level))?;
    Ok((f.name, level))
}

fn scram_mechanism_to_pb(mechanism: ScramMechanism) -> i32 {
    match mechanism {
        ScramMechanism::Sha256 => pb::ScramMechanism::ScramSha256,
        ScramMechanism::Sha512 => pb::ScramMechanism::ScramSha512,
    }
    .into()
}

fn scram_mechanism_from_pb(code: i32) -> Decoded<ScramMechanism> {
    match pb::ScramMechanism::try_from(code) {
        Ok(pb::ScramMechanism::ScramSha256) => Ok(ScramMechanism::Sha256),
        Ok(pb::ScramMechanism::ScramSha512) => Ok(ScramMechanism::Sha512),
        Ok(pb::ScramMechanism::Unspecified) => Err("SCRAM mechanism is missing".into()),
        Err(_) => Err(format!("SCRAM mechanism {code} is unknown")),
    }
}

fn user_mechanism_to_pb(user: &str, mechanism: ScramMechanism) -> pb::UserMechanism {
    pb::UserMechanism {
        user: user.to_string(),
        mechanism: scram_mechanism_to_pb(mechanism),
    }
}

fn user_mechanism_from_pb(u: pb::UserMechanism) -> Decoded<(String, ScramMechanism)> {
    Ok((u.user, scram_mechanism_from_pb(u.mechanism)?))
}

fn scram_credential_to_pb(c: &ScramCredential) -> pb::ScramCredential {
    pb::ScramCredential {
        user: c.user.clone(),
        mechanism: scram_mechanism_to_pb(c.mechanism),
        salt: c.salt.clone(),
        stored_key: c.stored_key.clone(),
        server_key: c.server_key.clone(),
        iterations: c.iterations,
    }
}

fn scram_credential_from_pb(c: pb::ScramCredential) -> Decoded<ScramCredential> {
    if c.user.is_empty() || c.salt.is_empty() || c.stored_key.is_empty() || c.server_key.is_empty() {
        return Err(format!("SCRAM credential of {:?} lacks a user, salt or key", c.user));
    }
    Ok(ScramCredential {
        mechanism: scram_mechanism_from_pb(c.mechanism)?,
        user: c.user,
        salt: c.salt,
        stored_key: c.stored_key,
        server_key: c.server_key,
        iterations: c.iterations,
    })
}

fn acl_binding_to_pb(b: &AclBinding) -> pb::AclBinding {
    pb::AclBinding {
        resource_type: b.resource_type as i32,
        resource_name: b.resource_name.clone(),
        pattern_type: b.pattern_type as i32,
        principal: b.principal.clone(),
        host: b.host.clone(),
        operation: b.operation as i32,
        permission: b.permission as i32,
    }
}

/// A Kafka code as the `i8` it is on the wire, if the stored `i32` fits.
fn code(field: &str, value: i32) -> Decoded<i8> {
    in_range(field, value)
}

fn acl_binding_from_pb(b: pb::AclBinding) -> Decoded<AclBinding> {
    let bad = |field: &str, value: i32| format!("ACL {field} {value} is unknown");
    Ok(AclBinding {
        resource_type: ResourceType::from_code(code("resource type", b.resource_type)?)
            .ok_or_else(|| bad("resource type", b.resource_type))?,
        pattern_type: PatternType::from_code(code("pattern type", b.pattern_type)?)
            .ok_or_else(|| bad("pattern type", b.pattern_type))?,
        operation: AclOperation::from_code(code("operation", b.operation)?)
            .ok_or_else(|| bad("operation", b.operation))?,
        permission: AclPermission::from_code(code("permission", b.permission)?)
            .ok_or_else(|| bad("permission", b.permission))?,
        resource_name: b.resource_name,
        principal: b.principal,
        host: b.host,
    })
}

fn acl_entry_to_pb(id: &Uuid, binding: &AclBinding) -> pb::AclEntry {
    pb::AclEntry {
        id: id.as_bytes().to_vec(),
        binding: Some(acl_binding_to_pb(binding)),
    }
}

fn acl_entry_from_pb(e: pb::AclEntry) -> Decoded<(Uuid, AclBinding)> {
    Ok((
        uuid("ACL id", &e.id)?,
        acl_binding_from_pb(required("ACL binding", e.binding)?)?,
    ))
}

/// ANY (1) is a filter's "every value"; stored filters carry it as the code.
const ANY_CODE: i32 = 1;

fn acl_filter_to_pb(f: &AclFilter) -> pb::AclFilter {
    pb::AclFilter {
        resource_type: f.resource_type.map_or(ANY_CODE, |t| t as i32),
        resource_name: f.resource_name.clone(),
        pattern_type: match f.pattern {
            PatternFilter::Any => ANY_CODE,
            PatternFilter::Match => 2,
            PatternFilter::Exactly(t) => t as i32,
        },
        principal: f.principal.clone(),
        host: f.host.clone(),
        operation: f.operation.map_or(ANY_CODE, |o| o as i32),
        permission: f.permission.map_or(ANY_CODE, |p| p as i32),
    }
}

fn acl_filter_from_pb(f: pb::AclFilter) -> Decoded<AclFilter> {
    let any_or = |field: &str, value: i32| -> Decoded<Option<i8>> {
        if value == ANY_CODE {
            Ok(None)
        } else {
            code(field, value).map(Some)
        }
    };
    let bad = |field: &str, value: i32| format!("ACL filter {field} {value} is unknown");
    Ok(AclFilter {
        resource_type: any_or("resource type", f.resource_type)?
            .map(|c| ResourceType::from_code(c).ok_or_else(|| bad("resource type", f.resource_type)))
            .transpose()?,
        pattern: PatternFilter::from_code(code("pattern type", f.pattern_type)?)
            .ok_or_else(|| bad("pattern type", f.pattern_type))?,
        operation: any_or("operation", f.operation)?
            .map(|c| AclOperation::from_code(c).ok_or_else(|| bad("operation", f.operation)))
            .transpose()?,
        permission: any_or("permission", f.permission)?
            .map(|c| AclPermission::from_code(c).ok_or_else(|| bad("permission", f.permission)))
            .transpose()?,
        resource_name: f.resource_name,
        principal: f.principal,
        host: f.host,
    })
}

fn quota_name_to_pb(name: &QuotaName) -> pb::QuotaName {
    pb::QuotaName {
        name: name.as_wire().map(str::to_string),
    }
}

fn quota_entity_to_pb(entity: &QuotaEntity) -> pb::QuotaEntity {
    pb::QuotaEntity {
        user: entity.user.as_ref().map(quota_name_to_pb),
        client_id: entity.client_id.as_ref().map(quota_name_to_pb),
    }
}

fn quota_entity_from_pb(entity: pb::QuotaEntity) -> QuotaEntity {
    let name = |n: pb::QuotaName| QuotaName::from_wire(n.name.as_deref());
    QuotaEntity {
        user: entity.user.map(name),
        client_id: entity.client_id.map(name),
    }
}

fn partition_to_pb(p: &PartitionRegistration) -> pb::PartitionRegistration {
    pb::PartitionRegistration {
        replicas: p.replicas.to_vec(),
        isr: p.isr.to_vec(),
        leader: p.leader,
        leader_epoch: p.leader_epoch,
        partition_epoch: p.partition_epoch,
        adding_replicas: p.adding_replicas().to_vec(),
        removing_replicas: p.removing_replicas().to_vec(),
        election: p.election.map(election_to_pb),
    }
}

fn partition_from_pb(p: pb::PartitionRegistration) -> PartitionRegistration {
    PartitionRegistration {
        replicas: p.replicas.into(),
        isr: p.isr.into(),
        leader: p.leader,
        leader_epoch: p.leader_epoch,
        partition_epoch: p.partition_epoch,
        reassignment: Reassignment::of(p.adding_replicas.into(), p.removing_replicas.into()),
        election: p.election.and_then(election_from_pb),
    }
}

fn election_to_pb(e: LeaderElection) -> pb::LeaderElection {
    use pb::{ElectionReason as PR, ElectionTrigger as PT};
    let reason = match e.reason {
        ElectionReason::Unchanged => PR::Unchanged,
        ElectionReason::Preferred => PR::Preferred,
        ElectionReason::InSync => PR::InSync,
        ElectionReason::Unclean => PR::Unclean,
        ElectionReason::Offline => PR::Offline,
    };
    let trigger = match e.trigger {
        ElectionTrigger::Created => PT::Created,
        ElectionTrigger::IsrChange => PT::IsrChange,
        ElectionTrigger::BrokerLeft => PT::BrokerLeft,
        ElectionTrigger::BrokerReturned => PT::BrokerReturned,
        ElectionTrigger::PreferredBalancing => PT::PreferredBalancing,
        ElectionTrigger::ElectLeaders => PT::ElectLeaders,
        ElectionTrigger::ReassignmentStarted => PT::ReassignmentStarted,
        ElectionTrigger::ReassignmentFinished => PT::ReassignmentFinished,
    };
    pb::LeaderElection {
        reason: reason.into(),
        trigger: trigger.into(),
    }
}

/// `None` for a reason or trigger this node does not know (written by a newer node): the
/// election is informational, and the rest of the record still applies.
fn election_from_pb(e: pb::LeaderElection) -> Option<LeaderElection> {
    use pb::{ElectionReason as PR, ElectionTrigger as PT};
    let reason = match PR::try_from(e.reason).ok()? {
        PR::Unspecified => return None,
        PR::Unchanged => ElectionReason::Unchanged,
        PR::Preferred => ElectionReason::Preferred,
        PR::InSync => ElectionReason::InSync,
        PR::Unclean => ElectionReason::Unclean,
        PR::Offline => ElectionReason::Offline,
    };
    let trigger = match PT::try_from(e.trigger).ok()? {
        PT::Unspecified => return None,
        PT::Created => ElectionTrigger::Created,
        PT::IsrChange => ElectionTrigger::IsrChange,
        PT::BrokerLeft => ElectionTrigger::BrokerLeft,
        PT::BrokerReturned => ElectionTrigger::BrokerReturned,
        PT::PreferredBalancing => ElectionTrigger::PreferredBalancing,
        PT::ElectLeaders => ElectionTrigger::ElectLeaders,
        PT::ReassignmentStarted => ElectionTrigger::ReassignmentStarted,
        PT::ReassignmentFinished => ElectionTrigger::ReassignmentFinished,
    };
    Some(LeaderElection { reason, trigger })
}

fn record_to_pb(record: &MetadataRecord) -> pb::MetadataRecord {
    use pb::metadata_record::Record as R;
    let record = match record {
        MetadataRecord::RegisterBroker {
            broker_id,
            incarnation_id,
            endpoints,
            rack,
            replica_capacity,
        } => R::RegisterBroker(register_to_pb(
            *broker_id,
            incarnation_id,
            endpoints,
            rack,
            *replica_capacity,
            false,
        )),
        MetadataRecord::Topic { name, topic_id } => R::Topic(topic_record_to_pb(name, topic_id)),
        MetadataRecord::Partition {
            topic_id,
            partition,
            replicas,
            isr,
            leader,
            leader_epoch,
            partition_epoch,
            election,
        } => R::Partition(pb::PartitionRecord {
            topic_id: topic_id.as_bytes().to_vec(),
            partition: *partition,
            registration: Some(pb::PartitionRegistration {
                replicas: replicas.clone(),
                isr: isr.clone(),
                leader: *leader,
                leader_epoch: *leader_epoch,
                partition_epoch: *partition_epoch,
                election: election.map(election_to_pb),
                // A Partition record leaves a reassignment under way as it is.
                ..Default::default()
            }),
        }),
        MetadataRecord::Config { resource, name, value } => {
            use pb::config_resource::Resource;
            let resource = match resource {
                ConfigResource::Topic(topic) => Resource::Topic(topic.clone()),
                ConfigResource::Broker(id) => Resource::Broker(*id),
                ConfigResource::Group(group_id) => Resource::Group(group_id.clone()),
            };
            R::Config(pb::ConfigRecord {
                resource: Some(pb::ConfigResource {
                    resource: Some(resource),
                }),
                name: name.clone(),
                value: value.clone(),
            })
        }
        MetadataRecord::RemoveTopic { topic_id } => R::RemoveTopic(pb::TopicId {
            topic_id: topic_id.as_bytes().to_vec(),
        }),
        MetadataRecord::FenceBroker { broker_id } => R::FenceBroker(pb::BrokerId { broker_id: *broker_id }),
        MetadataRecord::UnfenceBroker { broker_id } => R::UnfenceBroker(pb::BrokerId { broker_id: *broker_id }),
        MetadataRecord::BrokerShutdown { broker_id } => R::BrokerShutdown(pb::BrokerId { broker_id: *broker_id }),
        MetadataRecord::RegistrationPending {
            broker_id,
            incarnation_id,
        } => R::RegistrationPending(broker_incarnation_to_pb(*broker_id, Some(incarnation_id))),
        MetadataRecord::ProducerIds {
            broker_id,
            next_block_start,
        } => R::ProducerIds(pb::ProducerIds {
            broker_id: *broker_id,
            next_block_start: *next_block_start,
        }),
        MetadataRecord::PartitionReassignment {
            topic_id,
            partition,
            adding,
            removing,
        } => R::PartitionReassignment(pb::PartitionReassignment {
            topic_id: topic_id.as_bytes().to_vec(),
            partition: *partition,
            adding_replicas: adding.clone(),
            removing_replicas: removing.clone(),
        }),
        MetadataRecord::ClientQuota { entity, key, value } => R::ClientQuota(pb::ClientQuotaRecord {
            entity: Some(quota_entity_to_pb(entity)),
            key: key.clone(),
            value: value.map(|v| v.0),
        }),
        MetadataRecord::ScramCredential(c) => R::ScramCredential(scram_credential_to_pb(c)),
        MetadataRecord::RemoveScramCredential { user, mechanism } => {
            R::RemoveScramCredential(user_mechanism_to_pb(user, *mechanism))
        }
        MetadataRecord::Acl { id, binding } => R::Acl(acl_entry_to_pb(id, binding)),
        MetadataRecord::RemoveAcl { id } => R::RemoveAcl(pb::AclId {
            id: id.as_bytes().to_vec(),
        }),
        MetadataRecord::FeatureLevel { name, level } => R::FeatureLevel(feature_level_to_pb(name, *level)),
    };
    pb::MetadataRecord { record: Some(record) }
}

fn record_from_pb(record: pb::MetadataRecord) -> Decoded<MetadataRecord> {
    use pb::config_resource::Resource;
    use pb::metadata_record::Record as R;
    Ok(
        match required("record (absent, or of a kind this build does not know)", record.record)? {
            R::RegisterBroker(r) => {
                let r = register_from_pb(r)?;
                MetadataRecord::RegisterBroker {
                    broker_id: r.broker_id,
                    incarnation_id: r.incarnation_id,
                    endpoints: r.endpoints,
                    rack: r.rack,
                    replica_capacity: r.replica_capacity,
                }
            }
            R::Topic(t) => MetadataRecord::Topic {
                topic_id: uuid("topic record topic_id", &t.topic_id)?,
                name: t.name,
            },
            R::Partition(p) => {
                let registration = partition_from_pb(required("partition record registration", p.registration)?);
                MetadataRecord::Partition {
                    topic_id: uuid("partition record topic_id", &p.topic_id)?,
                    partition: p.partition,
                    replicas: registration.replicas.to_vec(),
                    isr: registration.isr.to_vec(),
                    leader: registration.leader,
                    leader_epoch: registration.leader_epoch,
                    partition_epoch: registration.partition_epoch,
                    election: registration.election,
                }
            }
            R::Config(c) => {
                let resource = required("config record resource", c.resource)?;
                MetadataRecord::Config {
                    resource: match required("config record resource kind", resource.resource)? {
                        Resource::Topic(topic) => ConfigResource::Topic(topic),
                        Resource::Broker(id) => ConfigResource::Broker(id),
                        Resource::Group(group_id) => ConfigResource::Group(group_id),
                    },
                    name: c.name,
                    value: c.value,
                }
            }
            R::RemoveTopic(t) => MetadataRecord::RemoveTopic {
                topic_id: uuid("remove_topic topic_id", &t.topic_id)?,
            },
            R::FenceBroker(b) => MetadataRecord::FenceBroker { broker_id: b.broker_id },
            R::UnfenceBroker(b) => MetadataRecord::UnfenceBroker { broker_id: b.broker_id },
            R::BrokerShutdown(b) => MetadataRecord::BrokerShutdown { broker_id: b.broker_id },
            R::RegistrationPending(b) => MetadataRecord::RegistrationPending {
                broker_id: b.broker_id,
                incarnation_id: uuid("registration_pending incarnation_id", &b.incarnation_id)?,
            },
            R::ProducerIds(p) => MetadataRecord::ProducerIds {
                broker_id: p.broker_id,
                next_block_start: p.next_block_start,
            },
            R::PartitionReassignment(r) => MetadataRecord::PartitionReassignment {
                topic_id: uuid("partition_reassignment topic_id", &r.topic_id)?,
                partition: r.partition,
                adding: r.adding_replicas,
                removing: r.removing_replicas,
            },
            R::ClientQuota(q) => MetadataRecord::ClientQuota {
                entity: quota_entity_from_pb(required("client_quota record entity", q.entity)?),
                key: q.key,
                value: q.value.map(QuotaValue),
            },
            R::ScramCredential(c) => MetadataRecord::ScramCredential(scram_credential_from_pb(c)?),
            R::RemoveScramCredential(u) => {
                let (user, mechanism) = user_mechanism_from_pb(u)?;
                MetadataRecord::RemoveScramCredential { user, mechanism }
            }
            R::Acl(e) => {
                let (id, binding) = acl_entry_from_pb(e)?;
                MetadataRecord::Acl { id, binding }
            }
            R::RemoveAcl(a) => MetadataRecord::RemoveAcl {
                id: uuid("remove_acl id", &a.id)?,
            },
            R::FeatureLevel(f) => {
                let (name, level) = feature_level_from_pb(f)?;
                MetadataRecord::FeatureLevel { name, level }
            }
        },
    )
}

fn topic_record_to_pb(name: &str, topic_id: &Uuid) -> pb::TopicRecord {
    pb::TopicRecord {
        name: name.to_owned(),
        topic_id: topic_id.as_bytes().to_vec(),
    }
}

fn image_to_pb(image: &MetadataImage) -> pb::Image {
    // Sorted, so that one image always encodes to the same bytes.
    let topic_names: BTreeMap<&Uuid, &String> = image.topic_names.iter().collect();
    pb::Image {
        cluster_id: image.cluster_id.clone(),
        last_offset: image.last_offset,
        brokers: image
            .brokers
            .values()
            .map(|b| pb::BrokerRegistration {
                broker_id: b.broker_id,
                incarnation_id: b.incarnation_id.as_bytes().to_vec(),
                endpoints: endpoints_to_pb(&b.endpoints),
                rack: b.rack.clone(),
                fenced: b.fenced,
                in_controlled_shutdown: b.in_controlled_shutdown,
                broker_epoch: b.broker_epoch,
                replica_capacity: b.replica_capacity,
                pending_incarnation: b.pending_incarnation.map(|id| id.as_bytes().to_vec()),
            })
            .collect(),
        topics: image
            .topics
            .values()
            .map(|t| pb::TopicImage {
                name: t.name.clone(),
                topic_id: t.topic_id.as_bytes().to_vec(),
                partitions: t.partitions.iter().map(partition_to_pb).collect(),
                configs: t.configs.clone(),
            })
            .collect(),
        topic_names: topic_names
            .into_iter()
            .map(|(id, name)| topic_record_to_pb(name, id))
            .collect(),
        broker_configs: image
            .broker_configs
            .iter()
            .map(|(broker_id, configs)| pb::BrokerConfigs {
                broker_id: *broker_id,
                configs: configs.clone(),
            })
            .collect(),
        next_producer_id: image.next_producer_id,
        client_quotas: image
            .client_quotas
            .iter()
            .map(|(entity, values)| pb::ClientQuotas {
                entity: Some(quota_entity_to_pb(entity)),
                values: values.iter().map(|(key, value)| (key.clone(), value.0)).collect(),
            })
            .collect(),
        scram_credentials: image.scram_credentials.values().map(scram_credential_to_pb).collect(),
        acls: image
            .acls
            .iter()
            .map(|(id, binding)| acl_entry_to_pb(id, binding))
            .collect(),
        features: image
            .features
            .iter()
            .map(|(name, level)| feature_level_to_pb(name, *level))
            .collect(),
        features_epoch: image.features_epoch,
        group_configs: image
            .group_configs
            .iter()
            .map(|(group_id, configs)| pb::GroupConfigs {
                group_id: group_id.clone(),
                configs: configs.clone(),
            })
            .collect(),
    }
}

fn image_from_pb(image: pb::Image) -> Decoded<MetadataImage> {
    let mut brokers = BTreeMap::new();
    for b in image.brokers {
        let broker = BrokerRegistration {
            broker_id: b.broker_id,
            incarnation_id: uuid("broker incarnation_id", &b.incarnation_id)?,
            endpoints: endpoints_from_pb(b.endpoints),
            rack: b.rack,
            fenced: b.fenced,
            in_controlled_shutdown: b.in_controlled_shutdown,
            broker_epoch: b.broker_epoch,
            replica_capacity: b.replica_capacity,
            pending_incarnation: b
                .pending_incarnation
                .map(|id| uuid("broker pending_incarnation", &id))
                .transpose()?,
        };
        if brokers.insert(b.broker_id, broker).is_some() {
            return Err(format!("broker {} is registered twice", b.broker_id));
        }
    }
    let mut topics = BTreeMap::new();
    for t in image.topics {
        let topic = TopicImage {
            name: t.name.clone(),
            topic_id: uuid("topic topic_id", &t.topic_id)?,
            partitions: t.partitions.into_iter().map(partition_from_pb).collect(),
            configs: t.configs,
        };
        if let Some(twice) = topics.insert(t.name, Arc::new(topic)) {
            return Err(format!("topic {:?} appears twice", twice.name));
        }
    }
    let mut topic_names = HashMap::new();
    for t in image.topic_names {
        topic_names.insert(uuid("topic name topic_id", &t.topic_id)?, t.name);
    }
    Ok(MetadataImage {
        cluster_id: image.cluster_id,
        last_offset: image.last_offset,
        brokers,
        topics,
        topic_names,
        broker_configs: image
            .broker_configs
            .into_iter()
            .map(|b| (b.broker_id, b.configs))
            .collect(),
        next_producer_id: image.next_producer_id,
        client_quotas: image
            .client_quotas
            .into_iter()
            .map(|q| {
                let entity = quota_entity_from_pb(required("client quotas entity", q.entity)?);
                let values = q.values.into_iter().map(|(k, v)| (k, QuotaValue(v))).collect();
                Ok((entity, values))
            })
            .collect::<Decoded<_>>()?,
        scram_credentials: image
            .scram_credentials
            .into_iter()
            .map(|c| {
                let c = scram_credential_from_pb(c)?;
                Ok(((c.user.clone(), c.mechanism), c))
            })
            .collect::<Decoded<_>>()?,
        acls: {
            let mut table = AclTable::default();
            for entry in image.acls {
                let (id, binding) = acl_entry_from_pb(entry)?;
                table.insert(id, binding);
            }
            std::sync::Arc::new(table)
        },
        features: image
            .features
            .into_iter()
            .map(feature_level_from_pb)
            .collect::<Decoded<_>>()?,
        features_epoch: image.features_epoch,
        group_configs: image
            .group_configs
            .into_iter()
            .map(|g| (g.group_id, g.configs))
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::records::BROKER_DEFAULT;

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    fn endpoints() -> Vec<Endpoint> {
        vec![
            Endpoint::plaintext("a.example", 9092),
            Endpoint {
                listener: "EXTERNAL".into(),
                host: "b.example".into(),
                port: 19092,
            },
        ]
    }

    fn configs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// One of every record, optional fields both set and unset.
    fn every_record() -> Vec<MetadataRecord> {
        vec![
            MetadataRecord::RegisterBroker {
                broker_id: 1,
                incarnation_id: id(11),
                endpoints: endpoints(),
                rack: Some("rack-a".into()),
                replica_capacity: Some(6_633),
            },
            MetadataRecord::RegisterBroker {
                broker_id: 0,
                incarnation_id: Uuid::nil(),
                endpoints: vec![],
                rack: None,
                replica_capacity: None,
            },
            MetadataRecord::Topic {
                name: "orders".into(),
                topic_id: id(7),
            },
            MetadataRecord::Partition {
                topic_id: id(7),
                partition: 3,
                replicas: vec![1, 2, 3],
                isr: vec![1, 3],
                leader: -1,
                leader_epoch: 5,
                partition_epoch: 9,
                election: Some(LeaderElection {
                    reason: ElectionReason::Offline,
                    trigger: ElectionTrigger::BrokerLeft,
                }),
            },
            MetadataRecord::Config {
                resource: ConfigResource::Topic("orders".into()),
                name: "retention.ms".into(),
                value: Some("1000".into()),
            },
            MetadataRecord::Config {
                resource: ConfigResource::Broker(2),
                name: "log.retention.ms".into(),
                value: None,
            },
            MetadataRecord::Config {
                resource: ConfigResource::Topic(String::new()),
                name: "x".into(),
                value: Some(String::new()),
            },
            MetadataRecord::Config {
                resource: ConfigResource::Group("g1".into()),
                name: "share.auto.offset.reset".into(),
                value: Some("earliest".into()),
            },
            MetadataRecord::Config {
                resource: ConfigResource::Group("g1".into()),
                name: "consumer.session.timeout.ms".into(),
                value: None,
            },
            MetadataRecord::RemoveTopic { topic_id: id(7) },
            MetadataRecord::FenceBroker { broker_id: 2 },
            MetadataRecord::UnfenceBroker { broker_id: 2 },
            MetadataRecord::BrokerShutdown { broker_id: 3 },
            MetadataRecord::RegistrationPending {
                broker_id: 1,
                incarnation_id: id(12),
            },
            MetadataRecord::ProducerIds {
                broker_id: 1,
                next_block_start: 1 << 40,
            },
            MetadataRecord::ClientQuota {
                entity: QuotaEntity {
                    user: Some(QuotaName::Named("alice".into())),
                    client_id: Some(QuotaName::Default),
                },
                key: "producer_byte_rate".into(),
                value: Some(QuotaValue(1024.0)),
            },
            MetadataRecord::ClientQuota {
                entity: QuotaEntity {
                    user: None,
                    client_id: Some(QuotaName::Named("app".into())),
                },
                key: "request_percentage".into(),
                value: Some(QuotaValue(12.5)),
            },
            MetadataRecord::ClientQuota {
                entity: QuotaEntity {
                    user: Some(QuotaName::Default),
                    client_id: None,
                },
                key: "consumer_byte_rate".into(),
                value: None,
            },
            MetadataRecord::ScramCredential(scram("alice", ScramMechanism::Sha256)),
            MetadataRecord::ScramCredential(scram("alice", ScramMechanism::Sha512)),
            MetadataRecord::RemoveScramCredential {
                user: "alice".into(),
                mechanism: ScramMechanism::Sha256,
            },
            MetadataRecord::Acl {
                id: id(31),
                binding: acl("orders", PatternType::Literal, AclPermission::Allow),
            },
            MetadataRecord::Acl {
                id: id(32),
                binding: acl("ord", PatternType::Prefixed, AclPermission::Deny),
            },
            MetadataRecord::Acl {
                id: id(33),
                binding: acl("x", PatternType::Literal, AclPermission::Allow),
            },
            MetadataRecord::RemoveAcl { id: id(33) },
            MetadataRecord::FeatureLevel {
                name: "transaction.version".into(),
                level: 2,
            },
        ]
    }

    fn scram(user: &str, mechanism: ScramMechanism) -> ScramCredential {
        ScramCredential {
            user: user.into(),
            mechanism,
            salt: vec![1, 2, 3],
            stored_key: vec![4; 32],
            server_key: vec![5; 32],
            iterations: 8192,
        }
    }

    fn acl(name: &str, pattern_type: PatternType, permission: AclPermission) -> AclBinding {
        AclBinding {
            resource_type: ResourceType::Topic,
            resource_name: name.into(),
            pattern_type,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: AclOperation::Write,
            permission,
        }
    }

    /// One of every command, optional fields both set and unset.
    fn every_command() -> Vec<MetadataCommand> {
        let topic = NewTopic {
            name: "orders".into(),
            num_partitions: 6,
            replication_factor: 3,
            replication_factor_defaulted: true,
            assignments: Some(vec![vec![1, 2, 3], vec![], vec![3, 1]]),
            configs: configs(&[("cleanup.policy", "compact"), ("retention.ms", "-1")]),
        };
        vec![
            MetadataCommand::RegisterBroker {
                broker_id: 4,
                incarnation_id: id(44),
                endpoints: endpoints(),
                rack: None,
                replica_capacity: Some(0),
                wait_for_previous_session: true,
            },
            MetadataCommand::RegisterBroker {
                broker_id: 5,
                incarnation_id: id(55),
                endpoints: vec![],
                rack: Some("r".into()),
                replica_capacity: None,
                wait_for_previous_session: false,
            },
            MetadataCommand::FenceBroker { broker_id: 1 },
            MetadataCommand::UnfenceBroker {
                broker_id: 1,
                incarnation_id: Some(id(11)),
            },
            MetadataCommand::UnfenceBroker {
                broker_id: 1,
                incarnation_id: None,
            },
            MetadataCommand::CreateTopic {
                topic: topic.clone(),
                topic_id: id(8),
            },
            MetadataCommand::CreateTopic {
                topic: NewTopic {
                    assignments: None,
                    replication_factor: -1,
                    configs: BTreeMap::new(),
                    ..topic
                },
                topic_id: id(9),
            },
            MetadataCommand::AllocateProducerIds { broker_id: 2 },
            MetadataCommand::DeleteTopic {
                name: Some("orders".into()),
                topic_id: Uuid::nil(),
            },
            MetadataCommand::DeleteTopic {
                name: None,
                topic_id: id(8),
            },
            MetadataCommand::CreatePartitions {
                name: "orders".into(),
                count: 12,
                assignments: Some(vec![vec![2], vec![3]]),
            },
            MetadataCommand::CreatePartitions {
                name: "orders".into(),
                count: 12,
                assignments: None,
            },
            MetadataCommand::AlterTopicConfigs {
                name: "orders".into(),
                ops: vec![
                    ("retention.ms".into(), AlterOp::Set, Some("5".into())),
                    ("segment.ms".into(), AlterOp::Delete, None),
                    ("cleanup.policy".into(), AlterOp::Append, Some("delete".into())),
                    ("cleanup.policy".into(), AlterOp::Subtract, Some("compact".into())),
                ],
                list_bases: configs(&[("cleanup.policy", "compact")]),
            },
            MetadataCommand::AlterBrokerConfigs {
                broker_id: BROKER_DEFAULT,
                ops: vec![
                    ("log.retention.ms".into(), AlterOp::Set, Some("60000".into())),
                    ("leader.replication.throttled.rate".into(), AlterOp::Delete, None),
                ],
            },
            MetadataCommand::AlterGroupConfigs {
                group_id: "g1".into(),
                ops: vec![
                    (
                        "share.auto.offset.reset".into(),
                        AlterOp::Set,
                        Some("by_duration:PT1H".into()),
                    ),
                    ("share.isolation.level".into(), AlterOp::Delete, None),
                ],
            },
            MetadataCommand::AlterPartition {
                topic_id: id(8),
                partition: 2,
                leader_id: 1,
                leader_epoch: 4,
                partition_epoch: 7,
                new_isr: vec![1, 2],
            },
            MetadataCommand::AlterPartitions {
                leader_id: 2,
                changes: vec![
                    IsrChangeRequest {
                        topic_id: id(8),
                        partition: 0,
                        leader_epoch: 3,
                        partition_epoch: 9,
                        new_isr: vec![2],
                    },
                    IsrChangeRequest {
                        topic_id: id(9),
                        partition: 5,
                        leader_epoch: 0,
                        partition_epoch: 1,
                        new_isr: vec![3, 2, 1],
                    },
                ],
            },
            MetadataCommand::AlterPartitions {
                leader_id: 1,
                changes: vec![],
            },
            MetadataCommand::ControlledShutdown {
                broker_id: 3,
                incarnation_id: id(33),
            },
            MetadataCommand::ElectPreferredLeaders,
            MetadataCommand::ElectLeaders {
                election: ElectionType::Unclean,
                partitions: Some(vec![("orders".into(), vec![0, 2]), ("empty".into(), vec![])]),
            },
            MetadataCommand::ElectLeaders {
                election: ElectionType::Preferred,
                partitions: Some(vec![]),
            },
            MetadataCommand::ElectLeaders {
                election: ElectionType::Preferred,
                partitions: None,
            },
            MetadataCommand::AlterClientQuotas {
                entity: QuotaEntity {
                    user: None,
                    client_id: Some(QuotaName::Default),
                },
                ops: vec![
                    ("producer_byte_rate".into(), Some(QuotaValue(2048.0))),
                    ("consumer_byte_rate".into(), None),
                ],
            },
            MetadataCommand::AlterScramCredentials {
                deletions: vec![("bob".into(), ScramMechanism::Sha512)],
                upsertions: vec![scram("alice", ScramMechanism::Sha256)],
                only_if_absent: true,
            },
            MetadataCommand::AlterScramCredentials {
                deletions: vec![],
                upsertions: vec![],
                only_if_absent: false,
            },
            MetadataCommand::CreateAcls {
                acls: vec![(id(41), acl("orders", PatternType::Prefixed, AclPermission::Allow))],
            },
            MetadataCommand::UpdateFeatures {
                updates: vec![("transaction.version".into(), 1), ("group.version".into(), 0)],
            },
            MetadataCommand::DeleteAcls {
                filters: vec![
                    AclFilter {
                        resource_type: None,
                        resource_name: None,
                        pattern: PatternFilter::Any,
                        principal: None,
                        host: None,
                        operation: None,
                        permission: None,
                    },
                    AclFilter {
                        resource_type: Some(ResourceType::Group),
                        resource_name: Some("g".into()),
                        pattern: PatternFilter::Match,
                        principal: Some("User:bob".into()),
                        host: Some("10.0.0.1".into()),
                        operation: Some(AclOperation::Read),
                        permission: Some(AclPermission::Deny),
                    },
                    AclFilter {
                        resource_type: Some(ResourceType::Topic),
                        resource_name: Some("t".into()),
                        pattern: PatternFilter::Exactly(PatternType::Literal),
                        principal: None,
                        host: None,
                        operation: Some(AclOperation::All),
                        permission: Some(AclPermission::Allow),
                    },
                ],
            },
        ]
    }

    #[test]
    fn every_record_round_trips() {
        for record in every_record() {
            assert_eq!(decode_record(&encode_record(&record)), Ok(record.clone()), "{record:?}");
        }
    }

    /// A reason or trigger written by a newer node reads as no election recorded: the record
    /// still applies.
    #[test]
    fn an_unknown_election_reason_reads_as_none() {
        let record = pb::MetadataRecord {
            record: Some(pb::metadata_record::Record::Partition(pb::PartitionRecord {
                topic_id: id(7).as_bytes().to_vec(),
                partition: 0,
                registration: Some(pb::PartitionRegistration {
                    replicas: vec![1],
                    isr: vec![1],
                    leader: 1,
                    election: Some(pb::LeaderElection { reason: 77, trigger: 1 }),
                    ..Default::default()
                }),
            })),
        };
        let decoded = decode_record(&seal(&record)).expect("the record decodes");
        let MetadataRecord::Partition { leader, election, .. } = decoded else {
            panic!("not a partition record: {decoded:?}");
        };
        assert_eq!((leader, election), (1, None));
    }

    #[test]
    fn every_command_round_trips_inside_a_proposal() {
        for command in every_command() {
            let proposal = Proposal {
                proposer: 2,
                incarnation: id(99),
                command,
            };
            assert_eq!(
                decode_proposal(&encode_proposal(&proposal)),
                Ok(proposal.clone()),
                "{proposal:?}"
            );
        }
    }

    #[test]
    fn a_group_config_record_is_tagged_with_kafkas_resource_type() {
        let record = MetadataRecord::Config {
            resource: ConfigResource::Group("g1".into()),
            name: "share.auto.offset.reset".into(),
            value: Some("earliest".into()),
        };
        let resource = match record_to_pb(&record).record {
            Some(pb::metadata_record::Record::Config(c)) => c.resource.map(|r| r.encode_to_vec()),
            other => panic!("not a config record: {other:?}"),
        };
        // Field 32, length-delimited: the varint of (32 << 3) | 2, then the id's length.
        assert_eq!(resource.as_deref(), Some(&[0x82, 0x02, 2, b'g', b'1'][..]));
        assert_eq!(decode_record(&encode_record(&record)), Ok(record));
    }

    #[test]
    fn an_image_round_trips_through_a_snapshot() {
        let mut image = MetadataImage::new("cluster-1".into());
        for record in every_record() {
            image.apply(&record);
        }
        for record in [
            MetadataRecord::Topic {
                name: "payments".into(),
                topic_id: id(5),
            },
            MetadataRecord::Partition {
                topic_id: id(5),
                partition: 0,
                replicas: vec![1, 2],
                isr: vec![1, 2],
                leader: 1,
                leader_epoch: 0,
                partition_epoch: 0,
                election: None,
            },
            MetadataRecord::Config {
                resource: ConfigResource::Topic("payments".into()),
                name: "retention.ms".into(),
                value: Some("1".into()),
            },
            MetadataRecord::Config {
                resource: ConfigResource::Broker(1),
                name: "log.segment.bytes".into(),
                value: Some("1024".into()),
            },
            MetadataRecord::Config {
                resource: ConfigResource::Group("no-such-group-yet".into()),
                name: "share.isolation.level".into(),
                value: Some("read_committed".into()),
            },
            MetadataRecord::FenceBroker { broker_id: 1 },
            MetadataRecord::FeatureLevel {
                name: "transaction.version".into(),
                level: 1,
            },
        ] {
            image.apply(&record);
        }
        assert!(image.features_epoch > 0, "the features epoch is the feature record's offset");
        assert_eq!(image.features.get("transaction.version"), Some(&1), "features are part of the snapshot");
        assert!(!image.brokers.is_empty() && !image.broker_configs.is_empty() && image.next_producer_id > 0);
        assert_eq!(image.client_quotas.len(), 2, "client quotas are part of the snapshot");
        assert_eq!(
            image.scram_credentials.len(),
            1,
            "SCRAM credentials are part of the snapshot"
        );
        assert_eq!(image.acls.len(), 2, "ACLs are part of the snapshot");
        assert_eq!(
            image
                .group_configs("no-such-group-yet")
                .and_then(|c| c.get("share.isolation.level"))
                .map(String::as_str),
            Some("read_committed"),
            "group configs are part of the snapshot"
        );
        assert_eq!(
            image.brokers[&1].pending_incarnation,
            Some(id(12)),
            "a pending incarnation is part of the snapshot"
        );
        assert_eq!(image.topic("payments").map(|t| t.partitions.len()), Some(1));
        let bytes = encode_image(&image);
        assert_eq!(decode_image(&bytes), Ok(image.clone()));
        assert_eq!(
            encode_image(&image),
            bytes,
            "one image always encodes to the same bytes"
        );
    }

    #[test]
    fn a_newer_version_is_refused_before_its_payload_is_read() {
        let newer = pb::Envelope {
            metadata_version: METADATA_VERSION + 1,
            payload: vec![0xff; 3],
        }
        .encode_to_vec();
        let err = decode_proposal(&newer).unwrap_err();
        assert_eq!(
            err,
            DecodeError::UnknownVersion {
                found: METADATA_VERSION + 1
            }
        );
        assert_eq!(
            err.refusal("metadata log entry 42"),
            format!("metadata log entry 42 was written with metadata version {}, but this build of sluice understands versions up to {METADATA_VERSION}: upgrade sluice on this node to the version the rest of the cluster runs", METADATA_VERSION + 1)
        );
        assert_eq!(
            decode_image(&newer),
            Err(DecodeError::UnknownVersion {
                found: METADATA_VERSION + 1
            })
        );
    }

    #[test]
    fn version_3_registrations_and_unfencing_read_as_they_were_decided() {
        // Version 3 wrote UnfenceBroker as a bare BrokerId and RegisterBroker without the flag.
        let legacy = |command| {
            let proposal = pb::Proposal {
                proposer: 1,
                incarnation: id(1).as_bytes().to_vec(),
                command: Some(pb::MetadataCommand { command: Some(command) }),
            };
            let bytes = pb::Envelope {
                metadata_version: 3,
                payload: proposal.encode_to_vec(),
            }
            .encode_to_vec();
            decode_proposal(&bytes).unwrap().command
        };
        use pb::metadata_command::Command as C;
        let bare_id = pb::BrokerId { broker_id: 2 }.encode_to_vec();
        let unfence = pb::BrokerIncarnation::decode(bare_id.as_slice()).unwrap();
        assert_eq!(
            legacy(C::UnfenceBroker(unfence)),
            MetadataCommand::UnfenceBroker {
                broker_id: 2,
                incarnation_id: None
            }
        );
        let register = pb::RegisterBroker {
            broker_id: 2,
            incarnation_id: id(2).as_bytes().to_vec(),
            ..Default::default()
        };
        assert!(matches!(
            legacy(C::RegisterBroker(register)),
            MetadataCommand::RegisterBroker {
                wait_for_previous_session: false,
                ..
            }
        ));
    }

    #[test]
    fn unknown_acl_codes_and_incomplete_credentials_are_refused() {
        use pb::metadata_record::Record as R;
        let refused = |record: R| {
            let bytes = seal(&pb::MetadataRecord { record: Some(record) });
            decode_record(&bytes).unwrap_err()
        };
        let mut binding = acl_binding_to_pb(&acl("t", PatternType::Literal, AclPermission::Allow));
        binding.operation = 99;
        let err = refused(R::Acl(pb::AclEntry {
            id: id(1).as_bytes().to_vec(),
            binding: Some(binding),
        }));
        assert!(
            matches!(err, DecodeError::Malformed { ref detail, .. } if detail.contains("operation 99")),
            "{err:?}"
        );
        let mut credential = scram_credential_to_pb(&scram("alice", ScramMechanism::Sha256));
        credential.stored_key.clear();
        assert!(matches!(
            refused(R::ScramCredential(credential)),
            DecodeError::Malformed { .. }
        ));
        let mut credential = scram_credential_to_pb(&scram("alice", ScramMechanism::Sha256));
        credential.mechanism = 7;
        assert!(matches!(
            refused(R::ScramCredential(credential)),
            DecodeError::Malformed { .. }
        ));
    }

    #[test]
    fn json_from_earlier_builds_and_garbage_are_refused() {
        let old =
            br#"{"proposer":1,"incarnation":"00000000-0000-0000-0000-000000000000","command":"ElectPreferredLeaders"}"#;
        assert_eq!(decode_proposal(old), Err(DecodeError::Unversioned));
        assert_eq!(decode_image(br#"{"cluster_id":"c"}"#), Err(DecodeError::Unversioned));
        for garbage in [&b""[..], b"\x00", b"\xff\xff\xff", b"\x08\x01\x12\x05abc"] {
            let err = decode_proposal(garbage).unwrap_err();
            assert!(matches!(err, DecodeError::Malformed { .. }), "{garbage:?}: {err:?}");
        }
    }

    /// Decodes a hand-built payload as a version-1 proposal, returning the error's detail.
    fn refusal_of(command: Option<pb::metadata_command::Command>, incarnation: Vec<u8>) -> String {
        let proposal = pb::Proposal {
            proposer: 1,
            incarnation,
            command: Some(pb::MetadataCommand { command }),
        };
        match decode_proposal(&seal(&proposal)) {
            Err(DecodeError::Malformed { detail, .. }) => detail,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn missing_fields_unknown_values_and_bad_uuids_are_refused() {
        use pb::metadata_command::Command as C;
        let good_id = id(1).as_bytes().to_vec();
        assert_eq!(
            refusal_of(Some(C::ElectPreferredLeaders(pb::Empty {})), vec![1, 2, 3]),
            "proposal incarnation is 3 bytes, not a 16-byte UUID"
        );
        assert!(refusal_of(None, good_id.clone()).starts_with("command (absent"));
        let create = |topic: bool, replication_factor: i32| {
            C::CreateTopic(pb::CreateTopic {
                topic: topic.then(|| pb::NewTopic {
                    replication_factor,
                    ..Default::default()
                }),
                topic_id: id(2).as_bytes().to_vec(),
            })
        };
        assert_eq!(
            refusal_of(Some(create(false, 1)), good_id.clone()),
            "create_topic topic is missing"
        );
        assert!(refusal_of(Some(create(true, 1 << 20)), good_id.clone())
            .starts_with("create_topic replication_factor 1048576 is out of range"));
        let alter = |op: i32| {
            C::AlterTopicConfigs(pb::AlterTopicConfigs {
                ops: vec![pb::AlterConfigOp {
                    op,
                    ..Default::default()
                }],
                ..Default::default()
            })
        };
        assert_eq!(
            refusal_of(Some(alter(77)), good_id.clone()),
            "alter config op 77 is unknown"
        );
        assert_eq!(
            refusal_of(Some(alter(0)), good_id.clone()),
            "alter config op is missing"
        );
        let elect = |election_type: i32| {
            C::ElectLeaders(pb::ElectLeaders {
                election_type,
                partitions: None,
            })
        };
        assert_eq!(refusal_of(Some(elect(0)), good_id.clone()), "election type is missing");
        assert_eq!(
            refusal_of(Some(elect(9)), good_id.clone()),
            "election type 9 is unknown"
        );
        let no_version = pb::Envelope::default().encode_to_vec();
        assert!(
            matches!(decode_proposal(&no_version), Err(DecodeError::Malformed { detail, .. }) if detail.contains("no metadata version"))
        );
        let record = pb::MetadataRecord {
            record: Some(pb::metadata_record::Record::Config(pb::ConfigRecord::default())),
        };
        assert!(
            matches!(decode_record(&seal(&record)), Err(DecodeError::Malformed { detail, .. }) if detail == "config record resource is missing")
        );
    }
}
