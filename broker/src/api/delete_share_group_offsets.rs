//! DeleteShareGroupOffsets (KIP-932): kafka-share-groups --delete-offsets. The stored state of
//! each named topic's share-partitions goes (tombstoned in `__consumer_offsets`), so members
//! coming back start those partitions from `share.auto.offset.reset`. The group must be an
//! empty share group (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND), as Kafka.
//!
//! Needs DELETE on the group (GROUP_AUTHORIZATION_FAILED) and READ on each topic
//! (TOPIC_AUTHORIZATION_FAILED for that topic, whose state stays), as OffsetDelete.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_share_group_offsets_response::DeleteShareGroupOffsetsResponseTopic;
use kafka_protocol::messages::{DeleteShareGroupOffsetsRequest, DeleteShareGroupOffsetsResponse};
use uuid::Uuid;

use super::{str_bytes, RequestContext};
use crate::metadata::acls::{AclOperation, ResourceType};

pub async fn handle(ctx: RequestContext, request: DeleteShareGroupOffsetsRequest) -> DeleteShareGroupOffsetsResponse {
    let RequestContext { broker, session, .. } = &ctx;
    let image = broker.metadata.image();
    let access = session.access(&broker.security.authorizer, &image.acls);
    let group_id = request.group_id.0.to_string();
    let failed = |error: ResponseError, message: String| {
        DeleteShareGroupOffsetsResponse::default()
            .with_error_code(error.code())
            .with_error_message(Some(str_bytes(message)).filter(|m| !m.is_empty()))
    };
    if !access.authorize(AclOperation::Delete, ResourceType::Group, &group_id) {
        return failed(ResponseError::GroupAuthorizationFailed, String::new());
    }
    // Per topic: its id and why its state stays, if so.
    let topics: Vec<(Uuid, Option<ResponseError>)> = request
        .topics
        .iter()
        .map(|t| match image.topic(&t.topic_name.0) {
            None => (Uuid::nil(), Some(ResponseError::UnknownTopicOrPartition)),
            Some(found) if !access.authorize(AclOperation::Read, ResourceType::Topic, &found.name) => {
                (found.topic_id, Some(ResponseError::TopicAuthorizationFailed))
            }
            Some(found) => (found.topic_id, None),
        })
        .collect();
    let deleting: Vec<Uuid> = topics.iter().filter(|(_, e)| e.is_none()).map(|(id, _)| *id).collect();
    if let Err((error, message)) = broker.groups.delete_share_offsets(&group_id, &deleting).await {
        return failed(error, message);
    }
    tracing::info!(group = %group_id, topics = deleting.len(), "share group offsets deleted");
    DeleteShareGroupOffsetsResponse::default().with_responses(
        request
            .topics
            .into_iter()
            .zip(topics)
            .map(|(t, (topic_id, error))| {
                DeleteShareGroupOffsetsResponseTopic::default()
                    .with_topic_name(t.topic_name)
                    .with_topic_id(topic_id)
                    .with_error_code(error.map_or(0, |e| e.code()))
            })
            .collect(),
    )
}
