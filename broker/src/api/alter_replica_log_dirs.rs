//! AlterReplicaLogDirs: moving a replica between log directories. Sluice keeps one log
//! directory per node (its data dir), so a replica is never moved: asking for that directory
//! is already satisfied, any other is LOG_DIR_NOT_FOUND, as Kafka answers for a directory it
//! was not configured with. Needs ALTER on the cluster, else every partition is answered
//! CLUSTER_AUTHORIZATION_FAILED, as Kafka.

use std::path::Path;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_replica_log_dirs_response::{
    AlterReplicaLogDirPartitionResult, AlterReplicaLogDirTopicResult,
};
use kafka_protocol::messages::{AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse};

use super::{Access, RequestContext};
use crate::metadata::acls::AclOperation;

pub fn handle(ctx: &RequestContext, request: AlterReplicaLogDirsRequest) -> AlterReplicaLogDirsResponse {
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    if let Some(refused) = refusal(session.access(&broker.security.authorizer, &image.acls), &request) {
        return refused;
    }
    let ours = std::path::absolute(&broker.config.data_dir).ok();
    let mut results = Vec::new();
    for dir in request.dirs {
        let same_dir = ours.as_deref() == std::path::absolute(Path::new(dir.path.as_str())).ok().as_deref();
        let code = if same_dir {
            0
        } else {
            tracing::info!(
                path = %dir.path,
                "AlterReplicaLogDirs names a directory this node does not have; Sluice keeps one log directory per node (its data dir)"
            );
            ResponseError::LogDirNotFound.code()
        };
        for topic in dir.topics {
            let partitions = topic
                .partitions
                .iter()
                .map(|&index| {
                    AlterReplicaLogDirPartitionResult::default()
                        .with_partition_index(index)
                        .with_error_code(code)
                })
                .collect();
            results.push(
                AlterReplicaLogDirTopicResult::default()
                    .with_topic_name(topic.name)
                    .with_partitions(partitions),
            );
        }
    }
    AlterReplicaLogDirsResponse::default().with_results(results)
}

/// The answer without ALTER on the cluster: every named partition refused.
fn refusal(access: Access<'_>, request: &AlterReplicaLogDirsRequest) -> Option<AlterReplicaLogDirsResponse> {
    if access.authorize_cluster(AclOperation::Alter) {
        return None;
    }
    let code = ResponseError::ClusterAuthorizationFailed.code();
    let results = request
        .dirs
        .iter()
        .flat_map(|dir| &dir.topics)
        .map(|topic| {
            let partitions = topic
                .partitions
                .iter()
                .map(|&index| {
                    AlterReplicaLogDirPartitionResult::default()
                        .with_partition_index(index)
                        .with_error_code(code)
                })
                .collect();
            AlterReplicaLogDirTopicResult::default()
                .with_topic_name(topic.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    Some(AlterReplicaLogDirsResponse::default().with_results(results))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::testing::Acls;
    use crate::metadata::acls::ResourceType;
    use kafka_protocol::messages::alter_replica_log_dirs_request::{AlterReplicaLogDir, AlterReplicaLogDirTopic};
    use kafka_protocol::messages::TopicName;

    #[test]
    fn moving_replicas_needs_alter_on_the_cluster() {
        let request =
            AlterReplicaLogDirsRequest::default().with_dirs(vec![AlterReplicaLogDir::default().with_topics(vec![
                AlterReplicaLogDirTopic::default()
                    .with_name(TopicName(crate::api::str_bytes("orders")))
                    .with_partitions(vec![0, 1]),
            ])]);
        let topic_alter = Acls::none().allow(ResourceType::Topic, "orders", AclOperation::Alter);
        let refused = refusal(topic_alter.access(), &request).expect("ALTER on a topic is not on the cluster");
        let codes: Vec<i16> = refused.results[0].partitions.iter().map(|p| p.error_code).collect();
        assert_eq!(codes, vec![ResponseError::ClusterAuthorizationFailed.code(); 2]);
        assert!(refusal(Acls::none().allow_cluster(AclOperation::Alter).access(), &request).is_none());
    }
}
