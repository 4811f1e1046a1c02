//! DescribeProducers (KIP-664; `kafka-transactions describe-producers` and `find-hanging`):
//! the producers a replica remembers, from its producer state, with each one's open
//! transaction's first offset and the coordinator epoch of its last marker. Any replica
//! hosting the partition answers, leader or follower (Kafka reads its local log's state:
//! `find-hanging --broker-id` asks one broker about every partition it hosts);
//! NOT_LEADER_OR_FOLLOWER where none is hosted.
//!
//! Each topic needs READ (else its partitions get TOPIC_AUTHORIZATION_FAILED), as Kafka.

use std::collections::HashSet;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_producers_response::{PartitionResponse, ProducerState, TopicResponse};
use kafka_protocol::messages::{DescribeProducersRequest, DescribeProducersResponse, ProducerId};

use super::{str_bytes, Access, RequestContext};
use crate::metadata::acls::{AclOperation, ResourceType};
use crate::replica_manager::Serves;

pub fn handle(ctx: &RequestContext, request: DescribeProducersRequest) -> DescribeProducersResponse {
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    let access = session.access(&broker.security.authorizer, &image.acls);
    // A partition named twice is described once: the response stays bounded by the partitions
    // that exist, however many times a request repeats one.
    let mut described = HashSet::new();
    let topics = request
        .topics
        .iter()
        .map(|t| {
            let topic = image.topic(&t.name.0);
            let refusal = read_refusal(access, &t.name.0);
            let partitions = t
                .partition_indexes
                .iter()
                .map(|&index| {
                    let response = PartitionResponse::default().with_partition_index(index);
                    if let Some(message) = &refusal {
                        return response
                            .with_error_code(ResponseError::TopicAuthorizationFailed.code())
                            .with_error_message(Some(str_bytes(message.clone())));
                    }
                    let partition = match broker.replicas.serving_partition(topic, index, Serves::AnyReplica) {
                        Ok(partition) => partition,
                        Err(error) => return response.with_error_code(error.code()),
                    };
                    if !described.insert((partition.topic_id, index)) {
                        let message = format!("{}-{index} is listed twice; it is described once", t.name.0);
                        return response
                            .with_error_code(ResponseError::InvalidRequest.code())
                            .with_error_message(Some(str_bytes(message)));
                    }
                    response.with_active_producers(
                        partition
                            .active_producers()
                            .into_iter()
                            .map(|p| {
                                ProducerState::default()
                                    .with_producer_id(ProducerId(p.producer_id))
                                    .with_producer_epoch(i32::from(p.epoch))
                                    .with_last_sequence(p.last_sequence)
                                    .with_last_timestamp(p.last_timestamp)
                                    .with_coordinator_epoch(p.coordinator_epoch)
                                    .with_current_txn_start_offset(p.current_txn_start_offset)
                            })
                            .collect(),
                    )
                })
                .collect();
            TopicResponse::default()
                .with_name(t.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    DescribeProducersResponse::default().with_topics(topics)
}

/// Why the principal may not see the producers of topic `name`, if it may not.
fn read_refusal(access: Access<'_>, name: &str) -> Option<String> {
    let allowed = access.authorize(AclOperation::Read, ResourceType::Topic, name);
    (!allowed).then(|| access.denied(AclOperation::Read, ResourceType::Topic, name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::testing::Acls;

    #[test]
    fn describing_producers_needs_read_on_the_topic() {
        let acls = Acls::none()
            .allow(ResourceType::Topic, "orders", AclOperation::Read)
            .allow(ResourceType::Topic, "audit", AclOperation::Describe);
        assert_eq!(read_refusal(acls.access(), "orders"), None);
        assert!(read_refusal(acls.access(), "audit").is_some(), "DESCRIBE is not enough");
    }
}
