//! Controller decisions: validating admin requests against the metadata image and turning
//! them into metadata records. Pure functions of (image, request): no I/O, no clock, no
//! randomness (ids are passed in), so every decision is unit-tested and replayable.
//!
//! Shaped like Kafka's `QuorumController`: [`decide`] dispatches each command to the manager
//! that owns it. `topics` (names, creation, growth, deletion), `placement` (where replicas go),
//! `partition_change` (AlterPartition, elections, taking a broker out of service), `brokers`
//! (registration, fencing, controlled shutdown, liveness), `configs` and `producer_ids`.
//! Managers depend only on `outcome` and on each other downward, never on `decide`.

mod brokers;
mod configs;
mod outcome;
mod partition_change;
mod placement;
mod producer_ids;
mod topics;

#[cfg(test)]
mod test_support;

use kafka_protocol::error::ResponseError;

use crate::metadata::image::MetadataImage;
use crate::metadata::records::{MetadataCommand, MetadataRecord};

pub use brokers::{controlled_shutdown, fence_broker, liveness_changes};
pub use configs::alter_topic_configs;
pub use outcome::{ApiError, Outcome};
pub use partition_change::{alter_partition, elect_preferred_leaders, preferred_leader_imbalance};
pub use placement::{replication_factor, MAX_PARTITIONS_PER_TOPIC};
pub use producer_ids::PRODUCER_ID_BLOCK_SIZE;
pub use topics::{create_partitions, create_topic, delete_topic, validate_topic_name, MAX_TOPIC_NAME_LEN};

use partition_change::elect_leaders_for_returning;
use topics::existing_topic;

/// Decides a proposed command against the image: the records that carry it out, or why not.
/// Runs when the command is applied, in log order, identically on every node.
pub fn decide(image: &MetadataImage, command: &MetadataCommand) -> Result<(Vec<MetadataRecord>, Outcome), ApiError> {
    let done = |records| Ok((records, Outcome::Done));
    match command {
        MetadataCommand::RegisterBroker {
            broker_id,
            incarnation_id,
            endpoints,
            rack,
        } => {
            let mut records = vec![MetadataRecord::RegisterBroker {
                broker_id: *broker_id,
                incarnation_id: *incarnation_id,
                endpoints: endpoints.clone(),
                rack: rack.clone(),
            }];
            records.extend(elect_leaders_for_returning(image, *broker_id));
            done(records)
        }
        MetadataCommand::FenceBroker { broker_id } => done(fence_broker(image, *broker_id)),
        MetadataCommand::UnfenceBroker { broker_id } => {
            // A broker in controlled shutdown comes back only by registering again.
            if image
                .brokers
                .get(broker_id)
                .is_none_or(|b| !b.fenced || b.in_controlled_shutdown)
            {
                return done(Vec::new());
            }
            let mut records = vec![MetadataRecord::UnfenceBroker { broker_id: *broker_id }];
            records.extend(elect_leaders_for_returning(image, *broker_id));
            done(records)
        }
        MetadataCommand::CreateTopic { topic, topic_id } => done(create_topic(image, topic, *topic_id)?),
        MetadataCommand::AllocateProducerIds { broker_id } => {
            let first = image.next_producer_id;
            let record = MetadataRecord::ProducerIds {
                broker_id: *broker_id,
                next_block_start: first + PRODUCER_ID_BLOCK_SIZE,
            };
            Ok((
                vec![record],
                Outcome::ProducerIdBlock {
                    first,
                    size: PRODUCER_ID_BLOCK_SIZE,
                },
            ))
        }
        MetadataCommand::DeleteTopic { name, topic_id } => {
            let topic = match name {
                Some(n) => existing_topic(image, n)?,
                None => image.topic_by_id(topic_id).ok_or_else(|| {
                    ApiError::new(ResponseError::UnknownTopicId, format!("no topic has id {topic_id}"))
                })?,
            };
            let outcome = Outcome::TopicDeleted {
                name: topic.name.clone(),
                topic_id: topic.topic_id,
            };
            Ok((delete_topic(topic), outcome))
        }
        MetadataCommand::CreatePartitions {
            name,
            count,
            assignments,
        } => done(create_partitions(image, name, *count, assignments.as_deref())?),
        MetadataCommand::AlterTopicConfigs { name, ops, list_bases } => {
            done(alter_topic_configs(image, name, ops, list_bases)?)
        }
        MetadataCommand::ControlledShutdown {
            broker_id,
            incarnation_id,
        } => done(controlled_shutdown(image, *broker_id, *incarnation_id)),
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
        MetadataCommand::ElectPreferredLeaders => done(elect_preferred_leaders(image)),
    }
}
