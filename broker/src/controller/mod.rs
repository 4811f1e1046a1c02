//! Controller decisions: validating admin requests against the metadata image and turning
//! them into metadata records. Pure functions of (image, request): no I/O, no clock, no
//! randomness (ids are passed in), so every decision is unit-tested and replayable.
//!
//! Shaped like Kafka's `QuorumController`: [`decide`] dispatches each command to the manager
//! that owns it. `topics` (names, creation, growth, deletion), `placement` (where replicas go),
//! `election` (the one place a leader is chosen, with one rule for who may lead),
//! `partition_change` (AlterPartition, elections, taking a broker out of service),
//! `elect_leaders` (the ElectLeaders admin request), `reassignment` (moving a partition to new
//! replicas), `brokers` (registration, fencing, controlled shutdown, liveness), `configs`,
//! `quotas` (client quotas), `scram` (SCRAM credentials), `acls`, `features` (finalized
//! feature levels) and `producer_ids`.
//! Managers depend only on `outcome` and on each other downward, never on `decide`.
//!
//! `timer` is the one part with a clock: the active controller's loop that proposes fencing
//! and preferred leader elections, deciding what to propose with the pure functions.

pub mod acls;
mod brokers;
mod configs;
mod elect_leaders;
mod election;
pub mod features;
mod partition_change;
mod placement;
mod producer_ids;
pub mod quotas;
mod reassignment;
pub mod scram;
pub mod timer;
mod topics;

#[cfg(test)]
mod test_support;

use crate::metadata::image::MetadataImage;
use crate::metadata::records::{MetadataCommand, MetadataRecord};

pub use crate::metadata::outcome::{ApiError, Outcome};
pub use crate::topic_config::MAX_PARTITIONS_PER_TOPIC;
pub use brokers::{
    controlled_shutdown, fence_broker, liveness_changes, register_broker, unfence_broker, MemberContact,
};
pub use configs::{
    alter_broker_configs, alter_group_configs, alter_topic_configs, replace_broker_configs_ops,
    replace_group_configs_ops, replace_topic_configs_ops,
};
pub use elect_leaders::elect_leaders;
pub use partition_change::{alter_partition, alter_partitions, elect_preferred_leaders, preferred_leader_imbalance};
pub use placement::{propose_placement, replication_factor};
pub use producer_ids::{allocate_producer_ids, PRODUCER_ID_BLOCK_SIZE};
pub use quotas::alter_client_quotas;
pub use reassignment::reassign_partition;
pub use topics::{
    create_partitions, create_topic, delete_topic, is_internal_topic, may_auto_create, validate_topic_name,
    MAX_TOPIC_NAME_LEN, OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC,
};

/// Decides a proposed command against the image: the records that carry it out, or why not.
/// Runs when the command is applied, in log order, identically on every node. Each command
/// belongs to one manager; this only dispatches.
pub fn decide(image: &MetadataImage, command: &MetadataCommand) -> Result<(Vec<MetadataRecord>, Outcome), ApiError> {
    let done = |records| Ok((records, Outcome::Done));
    match command {
        MetadataCommand::RegisterBroker {
            broker_id,
            incarnation_id,
            endpoints,
            rack,
            replica_capacity,
            wait_for_previous_session,
        } => register_broker(
            image,
            *broker_id,
            *incarnation_id,
            endpoints,
            rack.as_deref(),
            *replica_capacity,
            *wait_for_previous_session,
        ),
        MetadataCommand::FenceBroker { broker_id } => done(fence_broker(image, *broker_id)),
        MetadataCommand::UnfenceBroker {
            broker_id,
            incarnation_id,
        } => done(unfence_broker(image, *broker_id, *incarnation_id)),
        MetadataCommand::ControlledShutdown {
            broker_id,
            incarnation_id,
        } => done(controlled_shutdown(image, *broker_id, *incarnation_id)),
        MetadataCommand::CreateTopic { topic, topic_id } => done(create_topic(image, topic, *topic_id)?),
        MetadataCommand::CreatePartitions {
            name,
            count,
            assignments,
        } => done(create_partitions(image, name, *count, assignments.as_deref())?),
        MetadataCommand::DeleteTopic { name, topic_id } => delete_topic(image, name.as_deref(), topic_id),
        MetadataCommand::AlterTopicConfigs { name, ops, list_bases } => {
            done(alter_topic_configs(image, name, ops, list_bases)?)
        }
        MetadataCommand::AlterBrokerConfigs { broker_id, ops } => done(alter_broker_configs(image, *broker_id, ops)?),
        MetadataCommand::AlterGroupConfigs { group_id, ops } => done(alter_group_configs(image, group_id, ops)?),
        MetadataCommand::AlterPartition {
            topic_id,
            partition,
            leader_id,
            leader_epoch,
            partition_epoch,
            new_isr,
        } => alter_partition(
            image,
            *topic_id,
            *partition,
            *leader_id,
            *leader_epoch,
            *partition_epoch,
            new_isr,
        ),
        MetadataCommand::AlterPartitions { leader_id, changes } => Ok(alter_partitions(image, *leader_id, changes)),
        MetadataCommand::ElectPreferredLeaders => done(elect_preferred_leaders(image)),
        MetadataCommand::ElectLeaders { election, partitions } => {
            Ok(elect_leaders(image, *election, partitions.as_deref()))
        }
        MetadataCommand::AllocateProducerIds { broker_id } => Ok(allocate_producer_ids(image, *broker_id)),
        MetadataCommand::ReassignPartition {
            name,
            partition,
            target,
        } => done(reassign_partition(image, name, *partition, target.as_deref())?),
        MetadataCommand::AlterClientQuotas { entity, ops } => done(alter_client_quotas(image, entity, ops)?),
        MetadataCommand::AlterScramCredentials {
            deletions,
            upsertions,
            only_if_absent,
        } => Ok(scram::alter_scram_credentials(
            image,
            deletions,
            upsertions,
            *only_if_absent,
        )),
        MetadataCommand::CreateAcls { acls } => done(acls::create_acls(image, acls)?),
        MetadataCommand::DeleteAcls { filters } => Ok(acls::delete_acls(image, filters)),
        MetadataCommand::UpdateFeatures { updates } => done(features::update_features(image, updates)?),
    }
}
