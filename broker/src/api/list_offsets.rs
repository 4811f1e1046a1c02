//! ListOffsets: earliest (-2), latest (-1), max timestamp (-3), or the first offset whose
//! timestamp is at or after a given time (through the time index).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use crate::broker::Broker;

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
const LATEST_TIERED: i64 = -5;
const FIRST_VERSION_WITH_LEADER_EPOCH: i16 = 4;

pub fn handle(broker: &Broker, request: ListOffsetsRequest, version: i16) -> ListOffsetsResponse {
    let image = broker.metadata.image();
    let topics = request
        .topics
        .into_iter()
        .map(|t| {
            let topic = image.topic(&t.name.0);
            let partitions = t
                .partitions
                .into_iter()
                .map(|p| {
                    let response = ListOffsetsPartitionResponse::default()
                        .with_partition_index(p.partition_index)
                        .with_timestamp(-1)
                        .with_offset(-1);
                    let hosted = match topic {
                        Some(topic) => broker.replicas.leader_partition(topic, p.partition_index),
                        None => Err(ResponseError::UnknownTopicOrPartition),
                    };
                    let partition = match hosted {
                        Ok((partition, _)) => partition,
                        Err(error) => return response.with_error_code(error.code()),
                    };
                    if let Err(error) = partition.check_leader_epoch(p.current_leader_epoch) {
                        return response.with_error_code(error.code());
                    }
                    // The field exists from v4; the codec refuses a non-default value before.
                    let epoch = partition.leader_epoch();
                    let reported_epoch = if version >= FIRST_VERSION_WITH_LEADER_EPOCH { epoch } else { -1 };
                    let found = match p.timestamp {
                        // No transactions yet, so the last stable offset is the high watermark.
                        LATEST | LATEST_TIERED => Ok(Some((-1, partition.high_watermark()))),
                        EARLIEST | EARLIEST_LOCAL => Ok(Some((-1, partition.log_start_offset()))),
                        MAX_TIMESTAMP => Ok(partition.max_timestamp_offset().map(|(offset, ts)| (ts, offset))),
                        ts if ts >= 0 => partition.offset_for_timestamp(ts).map(|o| o.map(|(offset, ts)| (ts, offset))),
                        _ => return response.with_error_code(ResponseError::InvalidRequest.code()),
                    };
                    match found {
                        Ok(Some((timestamp, offset))) => {
                            response.with_timestamp(timestamp).with_offset(offset).with_leader_epoch(reported_epoch)
                        }
                        Ok(None) => response.with_leader_epoch(reported_epoch),
                        Err(e) => {
                            tracing::error!(topic = %partition.topic, partition = partition.index, error = %e, "offset lookup failed");
                            response.with_error_code(e.kafka_error_code())
                        }
                    }
                })
                .collect();
            ListOffsetsTopicResponse::default().with_name(t.name).with_partitions(partitions)
        })
        .collect();
    ListOffsetsResponse::default().with_topics(topics)
}
