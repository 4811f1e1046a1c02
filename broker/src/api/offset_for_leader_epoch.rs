//! OffsetForLeaderEpoch: where a leader epoch ends in this replica's log. Followers ask it
//! before fetching so they can truncate to the leader's history (replicas never diverge), and
//! consumers (KIP-320) ask it after a leader change to detect truncation.
//!
//! As Kafka: CLUSTER_ACTION on the cluster answers every topic; without it a consumer needs
//! DESCRIBE on each topic (else its partitions get TOPIC_AUTHORIZATION_FAILED). A request
//! claiming a replica id (a follower's, v3+) needs CLUSTER_ACTION, else every partition is
//! refused.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::offset_for_leader_epoch_response::{EpochEndOffset, OffsetForLeaderTopicResult};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};

use super::{Access, RequestContext};
use crate::metadata::acls::{AclOperation, ResourceType};
use crate::replica_manager::Serves;

pub fn handle(ctx: &RequestContext, request: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse {
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    let access = session.access(&broker.security.authorizer, &image.acls);
    let may = TopicAccess::of(access, request.replica_id.0);
    let topics = request
        .topics
        .into_iter()
        .map(|t| {
            let topic = image.topic(&t.topic.0);
            let refused = !may.describe(&t.topic.0);
            let partitions = t
                .partitions
                .into_iter()
                .map(|p| {
                    let response = EpochEndOffset::default()
                        .with_partition(p.partition)
                        .with_leader_epoch(-1)
                        .with_end_offset(-1);
                    let serves = Serves::Leader {
                        current_leader_epoch: p.current_leader_epoch,
                    };
                    let hosted = match topic {
                        _ if refused => Err(ResponseError::TopicAuthorizationFailed),
                        _ => broker.replicas.serving_partition(topic, p.partition, serves),
                    };
                    let partition = match hosted {
                        Ok(partition) => partition,
                        Err(error) => return response.with_error_code(error.code()),
                    };
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

/// Which topics a request may ask about.
enum TopicAccess<'a> {
    /// CLUSTER_ACTION on the cluster: every topic.
    All,
    /// A consumer without it: the topics it may DESCRIBE.
    Described(Access<'a>),
    /// A follower without it: none.
    None,
}

impl<'a> TopicAccess<'a> {
    fn of(access: Access<'a>, replica_id: i32) -> TopicAccess<'a> {
        if replica_id >= 0 {
            // A follower claims CLUSTER_ACTION: its refusal is logged.
            match access.authorize_cluster(AclOperation::ClusterAction) {
                true => TopicAccess::All,
                false => TopicAccess::None,
            }
        } else if access.check_cluster(AclOperation::ClusterAction) {
            TopicAccess::All
        } else {
            TopicAccess::Described(access)
        }
    }

    fn describe(&self, name: &str) -> bool {
        match self {
            TopicAccess::All => true,
            TopicAccess::Described(access) => access.authorize(AclOperation::Describe, ResourceType::Topic, name),
            TopicAccess::None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::testing::Acls;

    #[test]
    fn consumers_need_describe_per_topic_or_cluster_action() {
        let acls = Acls::none().allow(ResourceType::Topic, "orders", AclOperation::Describe);
        let consumer = TopicAccess::of(acls.access(), -1);
        assert!(consumer.describe("orders"));
        assert!(!consumer.describe("payments"));
        let brokers = Acls::none().allow_cluster(AclOperation::ClusterAction);
        assert!(TopicAccess::of(brokers.access(), -1).describe("payments"));
    }

    #[test]
    fn a_follower_needs_cluster_action_whatever_topics_it_may_describe() {
        let acls = Acls::none().allow(ResourceType::Topic, "orders", AclOperation::Describe);
        assert!(!TopicAccess::of(acls.access(), 2).describe("orders"));
        let brokers = Acls::none().allow_cluster(AclOperation::ClusterAction);
        assert!(TopicAccess::of(brokers.access(), 2).describe("orders"));
        assert!(TopicAccess::of(Acls::disabled().access(), 2).describe("orders"));
    }
}
