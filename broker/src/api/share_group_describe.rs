//! ShareGroupDescribe (KIP-932): a share group's epochs and members with their assignments, as
//! kafka-share-groups --describe shows them. A classic or consumer group is GROUP_ID_NOT_FOUND
//! here, as Kafka.
//!
//! Needs DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED), and on every topic its members are
//! assigned (TOPIC_AUTHORIZATION_FAILED), as ConsumerGroupDescribe.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::share_group_describe_response::{Assignment, DescribedGroup, Member, TopicPartitions};
use kafka_protocol::messages::{ShareGroupDescribeRequest, ShareGroupDescribeResponse, TopicName};

use super::{str_bytes, RequestContext};
use crate::group::assignor;
use crate::metadata::acls::{AclOperation, ResourceType};
use crate::metadata::image::MetadataImage;

/// Kafka's only share group assignor.
const ASSIGNOR: &str = "simple";

pub fn handle(ctx: &RequestContext, request: ShareGroupDescribeRequest) -> ShareGroupDescribeResponse {
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    let access = session.access(&broker.security.authorizer, &image.acls);
    let groups = request
        .group_ids
        .into_iter()
        .map(|id| {
            let group = DescribedGroup::default().with_group_id(id.clone());
            let failed = |error: ResponseError, message: String| {
                group
                    .clone()
                    .with_error_code(error.code())
                    .with_error_message(Some(str_bytes(message)).filter(|m| !m.is_empty()))
                    .with_group_state(str_bytes("Dead"))
                    .with_authorized_operations(i32::MIN)
            };
            if !access.authorize(AclOperation::Describe, ResourceType::Group, &id.0) {
                return failed(ResponseError::GroupAuthorizationFailed, String::new());
            }
            let summary = match broker.groups.describe_share_group(&id.0) {
                Ok(summary) => summary,
                Err((error, message)) => return failed(error, message),
            };
            let hidden = summary
                .members
                .iter()
                .flat_map(|(_, m)| m.assignment.keys())
                .filter_map(|t| image.topic_by_id(t))
                .any(|t| !access.authorize(AclOperation::Describe, ResourceType::Topic, &t.name));
            if hidden {
                return failed(
                    ResponseError::TopicAuthorizationFailed,
                    "The group has assigned topic partitions that the principal may not describe.".into(),
                );
            }
            let operations = if request.include_authorized_operations {
                access.operations(ResourceType::Group, &id.0)
            } else {
                i32::MIN
            };
            group
                .with_group_state(str_bytes(summary.state))
                .with_group_epoch(summary.group_epoch)
                .with_assignment_epoch(summary.assignment_epoch)
                .with_assignor_name(str_bytes(ASSIGNOR))
                .with_authorized_operations(operations)
                .with_members(
                    summary
                        .members
                        .into_iter()
                        .map(|(member_id, m)| {
                            Member::default()
                                .with_member_id(str_bytes(member_id))
                                .with_rack_id(m.rack_id.map(str_bytes))
                                .with_member_epoch(m.member_epoch)
                                .with_client_id(str_bytes(m.client_id))
                                .with_client_host(str_bytes(m.client_host))
                                .with_subscribed_topic_names(
                                    m.subscribed_topic_names
                                        .into_iter()
                                        .map(|n| TopicName(str_bytes(n)))
                                        .collect(),
                                )
                                .with_assignment(assignment(&image, &m.assignment))
                        })
                        .collect(),
                )
        })
        .collect();
    ShareGroupDescribeResponse::default().with_groups(groups)
}

fn assignment(image: &MetadataImage, a: &assignor::Assignment) -> Assignment {
    Assignment::default().with_topic_partitions(
        a.iter()
            .filter_map(|(id, partitions)| {
                let topic = image.topic_by_id(id)?;
                Some(
                    TopicPartitions::default()
                        .with_topic_id(*id)
                        .with_topic_name(TopicName(str_bytes(topic.name.clone())))
                        .with_partitions(partitions.iter().copied().collect()),
                )
            })
            .collect(),
    )
}
