//! DescribeLogDirs (`kafka-log-dirs`): the one log directory this node has (its data dir), the
//! size of each partition replica it hosts, and the file system's total and usable bytes.
//! Sluice keeps one log directory per node, so there is never a future (moving) replica.
//! Needs DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED and no results, as Kafka.

use std::path::Path;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse, TopicName};

use super::{str_bytes, Access, RequestContext};
use crate::metadata::acls::AclOperation;

pub fn handle(ctx: &RequestContext, request: DescribeLogDirsRequest) -> DescribeLogDirsResponse {
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    if let Some(refused) = refusal(session.access(&broker.security.authorizer, &image.acls)) {
        return refused;
    }
    let wanted = |topic: &str, index: i32| match &request.topics {
        None => true,
        Some(topics) => topics
            .iter()
            .any(|t| t.topic.0.as_str() == topic && t.partitions.contains(&index)),
    };
    let mut hosted: Vec<_> = broker
        .replicas
        .all()
        .into_iter()
        .filter(|p| wanted(&p.topic, p.index))
        .collect();
    hosted.sort_by(|a, b| (&a.topic, a.index).cmp(&(&b.topic, b.index)));
    let mut topics: Vec<DescribeLogDirsTopic> = Vec::new();
    for partition in hosted {
        let described = DescribeLogDirsPartition::default()
            .with_partition_index(partition.index)
            .with_partition_size(partition.size_bytes() as i64)
            // How far this replica's end is behind its high watermark: 0 for a leader or a
            // caught-up follower (Kafka's non-future-replica lag).
            .with_offset_lag((partition.high_watermark() - partition.log_end_offset()).max(0))
            .with_is_future_key(false);
        match topics.last_mut() {
            Some(t) if t.name.0.as_str() == &*partition.topic => t.partitions.push(described),
            _ => topics.push(
                DescribeLogDirsTopic::default()
                    .with_name(TopicName(str_bytes(partition.topic.to_string())))
                    .with_partitions(vec![described]),
            ),
        }
    }
    let data_dir = &broker.config.data_dir;
    let (total_bytes, usable_bytes) = disk_space(data_dir).unwrap_or((-1, -1));
    let log_dir = std::path::absolute(data_dir).unwrap_or_else(|_| data_dir.clone());
    let result = DescribeLogDirsResult::default()
        .with_error_code(0) // the one directory is online
        .with_log_dir(str_bytes(log_dir.display().to_string()))
        .with_topics(topics)
        .with_total_bytes(total_bytes)
        .with_usable_bytes(usable_bytes);
    DescribeLogDirsResponse::default().with_results(vec![result])
}

/// Total and available bytes of the file system holding `dir`; -1 (Kafka's "unknown") when
/// it cannot be read.
fn disk_space(dir: &Path) -> Option<(i64, i64)> {
    let stat = rustix::fs::statvfs(dir).ok()?;
    let block = stat.f_frsize;
    let total = stat.f_blocks.saturating_mul(block);
    let usable = stat.f_bavail.saturating_mul(block);
    Some((i64::try_from(total).ok()?, i64::try_from(usable).ok()?))
}

/// The answer without DESCRIBE on the cluster.
fn refusal(access: Access<'_>) -> Option<DescribeLogDirsResponse> {
    (!access.authorize_cluster(AclOperation::Describe))
        .then(|| DescribeLogDirsResponse::default().with_error_code(ResponseError::ClusterAuthorizationFailed.code()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::testing::Acls;

    #[test]
    fn describing_log_dirs_needs_describe_on_the_cluster() {
        let refused = refusal(Acls::none().allow_cluster(AclOperation::DescribeConfigs).access()).expect("refused");
        assert_eq!(refused.error_code, ResponseError::ClusterAuthorizationFailed.code());
        assert!(refused.results.is_empty());
        assert!(refusal(Acls::none().allow_cluster(AclOperation::Describe).access()).is_none());
    }
}
