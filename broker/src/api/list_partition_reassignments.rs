//! ListPartitionReassignments (KIP-455; `kafka-reassign-partitions --verify/--list`): the
//! partitions whose move is under way, with the full replica set and the replicas being
//! added and removed, from this broker's metadata image. Needs DESCRIBE on the cluster, else
//! CLUSTER_AUTHORIZATION_FAILED, as Kafka.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    BrokerId, ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, TopicName,
};

use super::{str_bytes, Access, RequestContext};
use crate::metadata::acls::AclOperation;
use crate::metadata::image::{PartitionRegistration, TopicImage};

pub fn handle(ctx: &RequestContext, request: ListPartitionReassignmentsRequest) -> ListPartitionReassignmentsResponse {
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    if let Some(refused) = refusal(session.access(&broker.security.authorizer, &image.acls), &request) {
        return refused;
    }
    let mut topics = Vec::new();
    match &request.topics {
        // Every reassigning partition of every topic.
        None => {
            for topic in image.topics.values() {
                let all = (0..topic.partitions.len() as i32).collect::<Vec<_>>();
                push_ongoing(&mut topics, topic, &all);
            }
        }
        // Unknown topics and partitions are left out, as Kafka leaves them out.
        Some(asked) => {
            for t in asked {
                if let Some(topic) = image.topic(&t.name.0) {
                    push_ongoing(&mut topics, topic, &t.partition_indexes);
                }
            }
        }
    }
    ListPartitionReassignmentsResponse::default().with_topics(topics)
}

/// The answer without DESCRIBE on the cluster: the error, and the named partitions with
/// nothing about them (as Kafka's error response).
fn refusal(
    access: Access<'_>,
    request: &ListPartitionReassignmentsRequest,
) -> Option<ListPartitionReassignmentsResponse> {
    if access.authorize_cluster(AclOperation::Describe) {
        return None;
    }
    let topics = request
        .topics
        .iter()
        .flatten()
        .map(|t| {
            OngoingTopicReassignment::default()
                .with_name(t.name.clone())
                .with_partitions(
                    t.partition_indexes
                        .iter()
                        .map(|&i| OngoingPartitionReassignment::default().with_partition_index(i))
                        .collect(),
                )
        })
        .collect();
    Some(
        ListPartitionReassignmentsResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code())
            .with_error_message(Some(str_bytes(access.denied_cluster(AclOperation::Describe))))
            .with_topics(topics),
    )
}

fn push_ongoing(out: &mut Vec<OngoingTopicReassignment>, topic: &TopicImage, indexes: &[i32]) {
    let partitions: Vec<OngoingPartitionReassignment> = indexes
        .iter()
        .filter_map(|&i| {
            let p = usize::try_from(i).ok().and_then(|u| topic.partitions.get(u))?;
            p.is_reassigning().then(|| ongoing(i, p))
        })
        .collect();
    if !partitions.is_empty() {
        out.push(
            OngoingTopicReassignment::default()
                .with_name(TopicName(str_bytes(topic.name.clone())))
                .with_partitions(partitions),
        );
    }
}

fn ongoing(index: i32, p: &PartitionRegistration) -> OngoingPartitionReassignment {
    let ids = |v: &[i32]| v.iter().map(|&id| BrokerId(id)).collect::<Vec<_>>();
    OngoingPartitionReassignment::default()
        .with_partition_index(index)
        .with_replicas(ids(&p.replicas))
        .with_adding_replicas(ids(p.adding_replicas()))
        .with_removing_replicas(ids(p.removing_replicas()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::testing::Acls;

    #[test]
    fn listing_reassignments_needs_describe_on_the_cluster() {
        let request = ListPartitionReassignmentsRequest::default().with_topics(None);
        let refused = refusal(
            Acls::none().allow_cluster(AclOperation::ClusterAction).access(),
            &request,
        );
        assert_eq!(
            refused.map(|r| r.error_code),
            Some(ResponseError::ClusterAuthorizationFailed.code())
        );
        assert!(
            refusal(Acls::none().allow_cluster(AclOperation::Alter).access(), &request).is_none(),
            "ALTER implies DESCRIBE"
        );
    }
}
