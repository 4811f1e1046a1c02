//! AlterReplicaLogDirs: moving a replica between log directories. Sluice keeps one log
//! directory per node (its data dir), so a replica is never moved: asking for that directory
//! is already satisfied, any other is LOG_DIR_NOT_FOUND, as Kafka answers for a directory it
//! was not configured with.

use std::path::Path;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_replica_log_dirs_response::{
    AlterReplicaLogDirPartitionResult, AlterReplicaLogDirTopicResult,
};
use kafka_protocol::messages::{AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse};

use crate::broker::Broker;

pub fn handle(broker: &Broker, request: AlterReplicaLogDirsRequest) -> AlterReplicaLogDirsResponse {
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
