//! DescribeProducers (KIP-664; `kafka-transactions describe-producers`): the idempotent
//! producers a partition leader remembers, from its producer state. Only the leader answers
//! (NOT_LEADER_OR_FOLLOWER elsewhere), as in Kafka. Sluice has no transactions yet, so the
//! coordinator epoch and the open transaction's start offset are always -1.

use std::collections::HashSet;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_producers_response::{PartitionResponse, ProducerState, TopicResponse};
use kafka_protocol::messages::{DescribeProducersRequest, DescribeProducersResponse, ProducerId};

use super::str_bytes;
use crate::broker::Broker;

pub fn handle(broker: &Broker, request: DescribeProducersRequest) -> DescribeProducersResponse {
    let image = broker.metadata.image();
    // A partition named twice is described once: the response stays bounded by the partitions
    // that exist, however many times a request repeats one.
    let mut described = HashSet::new();
    let topics = request
        .topics
        .iter()
        .map(|t| {
            let topic = image.topic(&t.name.0);
            let partitions = t
                .partition_indexes
                .iter()
                .map(|&index| {
                    let response = PartitionResponse::default().with_partition_index(index);
                    let leader = match topic {
                        Some(topic) => broker.replicas.leader_partition(topic, index),
                        None => Err(ResponseError::UnknownTopicOrPartition),
                    };
                    let partition = match leader {
                        Ok((partition, _)) => partition,
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
                                    .with_coordinator_epoch(-1)
                                    .with_current_txn_start_offset(-1)
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
