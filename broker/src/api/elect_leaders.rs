//! ElectLeaders (KIP-460; `kafka-leader-election`): preferred or unclean leader election for
//! the named partitions, or for all of them. The controller decides each partition when the
//! command is applied (`controller::elect_leaders`); this only translates. Needs ALTER on
//! the cluster, else CLUSTER_AUTHORIZATION_FAILED (top level and on every named partition).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse, TopicName};

use super::{commit_error, str_bytes, Access, RequestContext};
use crate::metadata::acls::AclOperation;
use crate::metadata::outcome::{Outcome, TopicElection};
use crate::metadata::records::{ElectionType, MetadataCommand};

const FIRST_VERSION_WITH_TOP_LEVEL_ERROR: i16 = 1;

pub async fn handle(ctx: RequestContext, request: ElectLeadersRequest) -> ElectLeadersResponse {
    let version = ctx.version;
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    if let Some(message) = refusal(session.access(&broker.security.authorizer, &image.acls)) {
        return refuse_all(
            &request,
            version,
            ResponseError::ClusterAuthorizationFailed.code(),
            message,
        );
    }
    // v0 has no election type field and means preferred, which decodes as 0 too.
    let Some(election) = ElectionType::from_code(request.election_type) else {
        let message = format!(
            "election type {} is unknown: use 0 (preferred) or 1 (unclean)",
            request.election_type
        );
        return refuse_all(&request, version, ResponseError::InvalidRequest.code(), message);
    };
    let partitions = request.topic_partitions.as_ref().map(|topics| {
        topics
            .iter()
            .map(|t| (t.topic.0.to_string(), t.partitions.clone()))
            .collect()
    });
    match broker
        .commit(MetadataCommand::ElectLeaders { election, partitions })
        .await
    {
        Ok((_, Outcome::LeadersElected(topics))) => {
            let elected: usize = topics
                .iter()
                .flat_map(|t| &t.partitions)
                .filter(|(_, error)| error.is_none())
                .count();
            tracing::info!(?election, elected, "leader election requested by an admin client");
            ElectLeadersResponse::default()
                .with_replica_election_results(topics.into_iter().map(topic_result).collect())
        }
        Ok((_, outcome)) => {
            tracing::error!(?outcome, "ElectLeaders was decided with an unexpected outcome");
            let message = "the controller answered ElectLeaders with an unexpected outcome; retry".to_string();
            refuse_all(&request, version, ResponseError::UnknownServerError.code(), message)
        }
        Err(e) => {
            let (code, message) = commit_error(&e);
            refuse_all(&request, version, code, message)
        }
    }
}

/// Why the principal may not elect leaders (ALTER on the cluster), if it may not.
fn refusal(access: Access<'_>) -> Option<String> {
    (!access.authorize_cluster(AclOperation::Alter)).then(|| access.denied_cluster(AclOperation::Alter))
}

fn topic_result(topic: TopicElection) -> ReplicaElectionResult {
    let partitions = topic
        .partitions
        .into_iter()
        .map(|(index, error)| {
            let result = PartitionResult::default().with_partition_id(index);
            match error {
                None => result,
                Some(e) => result
                    .with_error_code(e.code())
                    .with_error_message(Some(str_bytes(e.message))),
            }
        })
        .collect();
    ReplicaElectionResult::default()
        .with_topic(TopicName(str_bytes(topic.topic)))
        .with_partition_result(partitions)
}

/// The whole request failed: the top-level error (v1+), and the same on every named
/// partition, since v0 has only per-partition errors.
fn refuse_all(request: &ElectLeadersRequest, version: i16, code: i16, message: String) -> ElectLeadersResponse {
    let results = request
        .topic_partitions
        .iter()
        .flatten()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|&index| {
                    PartitionResult::default()
                        .with_partition_id(index)
                        .with_error_code(code)
                        .with_error_message(Some(str_bytes(message.clone())))
                })
                .collect();
            ReplicaElectionResult::default()
                .with_topic(t.topic.clone())
                .with_partition_result(partitions)
        })
        .collect();
    // The crate refuses to encode a field the version lacks.
    let top_level = if version >= FIRST_VERSION_WITH_TOP_LEVEL_ERROR {
        code
    } else {
        0
    };
    ElectLeadersResponse::default()
        .with_error_code(top_level)
        .with_replica_election_results(results)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::testing::Acls;

    #[test]
    fn electing_leaders_needs_alter_on_the_cluster() {
        assert!(refusal(Acls::none().allow_cluster(AclOperation::AlterConfigs).access()).is_some());
        assert_eq!(refusal(Acls::none().allow_cluster(AclOperation::Alter).access()), None);
    }
}
