//! DescribeQuorum: the metadata quorum's leader, epoch, high watermark and replicas, as
//! `kafka-metadata-quorum describe --status` shows them. Needs DESCRIBE on the cluster, else
//! CLUSTER_AUTHORIZATION_FAILED, as Kafka.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_quorum_response::{Listener, Node, PartitionData, ReplicaState, TopicData};
use kafka_protocol::messages::{BrokerId, DescribeQuorumRequest, DescribeQuorumResponse};

use super::{str_bytes, Access, RequestContext};
use crate::clock::now_ms;
use crate::metadata::acls::AclOperation;
use crate::metadata::{node_id_of, METADATA_TOPIC};

/// The `nodes` field (controller endpoints) exists from v2.
const FIRST_VERSION_WITH_NODES: i16 = 2;

pub fn handle(ctx: &RequestContext, request: DescribeQuorumRequest) -> DescribeQuorumResponse {
    let version = ctx.version;
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    if let Some(refused) = refusal(session.access(&broker.security.authorizer, &image.acls)) {
        return refused;
    }
    let status = broker.metadata.quorum_status();
    let now = now_ms();
    let replica = |r: &sluice_raft_meta::ReplicaState| {
        // Only the leader tracks replicas' progress; elsewhere Kafka reports -1 too.
        let last_contact = r.last_contact_ms_ago.map_or(-1, |ms| now - ms as i64);
        ReplicaState::default()
            .with_replica_id(BrokerId(node_id_of(r.id)))
            .with_log_end_offset(r.match_index.map_or(-1, |i| i as i64))
            .with_last_fetch_timestamp(last_contact)
            .with_last_caught_up_timestamp(last_contact)
    };
    let topics = request
        .topics
        .iter()
        .map(|topic| {
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let data = PartitionData::default().with_partition_index(p.partition_index);
                    if topic.topic_name.0.as_str() != METADATA_TOPIC || p.partition_index != 0 {
                        return data.with_error_code(ResponseError::UnknownTopicOrPartition.code());
                    }
                    data.with_leader_id(BrokerId(status.leader_id.map_or(-1, node_id_of)))
                        .with_leader_epoch(status.term as i32)
                        .with_high_watermark(status.commit_index as i64)
                        .with_current_voters(status.voters.iter().map(replica).collect())
                        .with_observers(status.learners.iter().map(replica).collect())
                })
                .collect();
            TopicData::default()
                .with_topic_name(topic.topic_name.clone())
                .with_partitions(partitions)
        })
        .collect();
    let response = DescribeQuorumResponse::default().with_topics(topics);
    if version < FIRST_VERSION_WITH_NODES {
        return response;
    }
    let nodes = broker
        .config
        .voters
        .iter()
        .filter_map(|(id, addr)| {
            let (host, port) = addr.rsplit_once(':')?;
            let listener = Listener::default()
                .with_name(str_bytes("CONTROLLER"))
                .with_host(str_bytes(host))
                .with_port(port.parse().ok()?);
            Some(
                Node::default()
                    .with_node_id(BrokerId(*id))
                    .with_listeners(vec![listener]),
            )
        })
        .collect();
    response.with_nodes(nodes)
}

/// The answer without DESCRIBE on the cluster.
fn refusal(access: Access<'_>) -> Option<DescribeQuorumResponse> {
    (!access.authorize_cluster(AclOperation::Describe)).then(|| {
        DescribeQuorumResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code())
            .with_error_message(Some(str_bytes(access.denied_cluster(AclOperation::Describe))))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::testing::Acls;

    #[test]
    fn describing_the_quorum_needs_describe_on_the_cluster() {
        let refused = refusal(Acls::none().allow_cluster(AclOperation::DescribeConfigs).access());
        assert_eq!(
            refused.map(|r| r.error_code),
            Some(ResponseError::ClusterAuthorizationFailed.code())
        );
        assert!(refusal(Acls::none().allow_cluster(AclOperation::Describe).access()).is_none());
    }
}
