//! OffsetForLeaderEpoch: where a leader epoch ends in this replica's log. Followers ask it
//! before fetching so they can truncate to the leader's history (replicas never diverge), and
//! consumers (KIP-320) ask it after a leader change to detect truncation.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::offset_for_leader_epoch_response::{EpochEndOffset, OffsetForLeaderTopicResult};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};

use crate::broker::Broker;

pub fn handle(broker: &Broker, request: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse {
    let image = broker.metadata.image();
    let topics = request
        .topics
        .into_iter()
        .map(|t| {
            let topic = image.topic(&t.topic.0);
            let partitions = t
                .partitions
                .into_iter()
                .map(|p| {
                    let response = EpochEndOffset::default()
                        .with_partition(p.partition)
                        .with_leader_epoch(-1)
                        .with_end_offset(-1);
                    let hosted = match topic {
                        Some(topic) => broker.replicas.leader_partition(topic, p.partition),
                        None => Err(ResponseError::UnknownTopicOrPartition),
                    };
                    let partition = match hosted {
                        Ok((partition, _)) => partition,
                        Err(error) => return response.with_error_code(error.code()),
                    };
                    if let Err(error) = partition.check_leader_epoch(p.current_leader_epoch) {
                        return response.with_error_code(error.code());
                    }
                    let (epoch, end_offset) = partition.end_offset_for_epoch(p.leader_epoch);
                    response.with_leader_epoch(epoch).with_end_offset(end_offset)
                })
                .collect();
            OffsetForLeaderTopicResult::default()
                .with_topic(t.topic)
                .with_partitions(partitions)
        })
        .collect();
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}
