//! ListOffsets: earliest (-2), latest (-1), max timestamp (-3), or the first offset whose
//! timestamp is at or after a given time (through the time index). As in Kafka, a client
//! (replica id -1) is answered from what it may fetch: below the high watermark, or with
//! isolation level READ_COMMITTED below the last stable offset (so LATEST is the LSO); a
//! replica or a debugging tool from the whole log.
//!
//! Each topic needs DESCRIBE (else its partitions get TOPIC_AUTHORIZATION_FAILED), as Kafka.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use super::{Access, RequestContext};
use crate::metadata::acls::{AclOperation, ResourceType};
use crate::partition::ReadBound;
use crate::replica_manager::Serves;

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
const LATEST_TIERED: i64 = -5;
const FIRST_VERSION_WITH_LEADER_EPOCH: i16 = 4;
const CONSUMER_REPLICA_ID: i32 = -1;
/// Kafka's `IsolationLevel.READ_COMMITTED`.
const READ_COMMITTED: i8 = 1;

pub fn handle(ctx: &RequestContext, request: ListOffsetsRequest) -> ListOffsetsResponse {
    let version = ctx.version;
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    let access = session.access(&broker.security.authorizer, &image.acls);
    let bound = read_bound(request.replica_id.0, request.isolation_level);
    let topics = request
        .topics
        .into_iter()
        .map(|t| {
            let topic = image.topic(&t.name.0);
            let refused = !may_describe(access, &t.name.0);
            let partitions = t
                .partitions
                .into_iter()
                .map(|p| {
                    let response = ListOffsetsPartitionResponse::default()
                        .with_partition_index(p.partition_index)
                        .with_timestamp(-1)
                        .with_offset(-1);
                    let serves = Serves::Leader {
                        current_leader_epoch: p.current_leader_epoch,
                    };
                    let hosted = match topic {
                        _ if refused => Err(ResponseError::TopicAuthorizationFailed),
                        _ => broker.replicas.serving_partition(topic, p.partition_index, serves),
                    };
                    let partition = match hosted {
                        Ok(partition) => partition,
                        Err(error) => return response.with_error_code(error.code()),
                    };
                    // The field exists from v4; the codec refuses a non-default value before.
                    let epoch = partition.leader_epoch();
                    let reported_epoch = if version >= FIRST_VERSION_WITH_LEADER_EPOCH { epoch } else { -1 };
                    // A new leader whose high watermark has not reached the offset it began
                    // its epoch at would answer a stale latest offset (a reader stopping
                    // there misses committed records): clients are told to retry, as Kafka
                    // does. The earliest offset does not depend on it.
                    let stale = bound != ReadBound::LogEnd
                        && !matches!(p.timestamp, EARLIEST | EARLIEST_LOCAL)
                        && partition.high_watermark_behind_epoch_start();
                    if stale {
                        return response.with_error_code(ResponseError::OffsetNotAvailable.code());
                    }
                    let found = match p.timestamp {
                        LATEST | LATEST_TIERED => Ok(Some((-1, partition.last_fetchable_offset(bound)))),
                        EARLIEST | EARLIEST_LOCAL => Ok(Some((-1, partition.log_start_offset()))),
                        MAX_TIMESTAMP => Ok(partition.max_timestamp_offset(bound).map(|(offset, ts)| (ts, offset))),
                        ts if ts >= 0 => partition
                            .offset_for_timestamp(ts, bound)
                            .map(|o| o.map(|(offset, ts)| (ts, offset))),
                        _ => return response.with_error_code(ResponseError::InvalidRequest.code()),
                    };
                    match found {
                        Ok(Some((timestamp, offset))) => {
                            response.with_timestamp(timestamp).with_offset(offset).with_leader_epoch(reported_epoch)
                        }
                        Ok(None) => response.with_leader_epoch(reported_epoch),
                        Err(e) => {
                            tracing::error!(topic = %partition.topic, partition = partition.index, error = %e, "offset lookup failed");
                            response.with_error_code(e.response_error().code())
                        }
                    }
                })
                .collect();
            ListOffsetsTopicResponse::default().with_name(t.name).with_partitions(partitions)
        })
        .collect();
    ListOffsetsResponse::default().with_topics(topics)
}

/// Kafka's `fetchOffsetForTimestamp` bound: a consumer's last fetchable offset (the LSO under
/// READ_COMMITTED, else the HW); a replica's is the log end.
fn read_bound(replica_id: i32, isolation_level: i8) -> ReadBound {
    match (replica_id, isolation_level) {
        (CONSUMER_REPLICA_ID, READ_COMMITTED) => ReadBound::LastStable,
        (CONSUMER_REPLICA_ID, _) => ReadBound::HighWatermark,
        _ => ReadBound::LogEnd,
    }
}

/// Whether the principal may list the offsets of topic `name`.
fn may_describe(access: Access<'_>, name: &str) -> bool {
    access.authorize(AclOperation::Describe, ResourceType::Topic, name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::testing::Acls;

    #[test]
    fn read_committed_consumers_are_bounded_by_the_last_stable_offset() {
        assert_eq!(read_bound(-1, 1), ReadBound::LastStable);
        assert_eq!(read_bound(-1, 0), ReadBound::HighWatermark);
        assert_eq!(read_bound(3, 1), ReadBound::LogEnd);
    }

    #[test]
    fn listing_offsets_needs_describe_on_the_topic() {
        assert!(!may_describe(Acls::none().access(), "orders"));
        let acls = Acls::none().allow(ResourceType::Topic, "orders", AclOperation::Describe);
        assert!(may_describe(acls.access(), "orders"));
        assert!(!may_describe(acls.access(), "payments"));
    }
}
