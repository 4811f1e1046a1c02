//! ConsumerGroupDescribe (KIP-848): a consumer group's epochs, members, their assignments and
//! targets. A classic group is GROUP_ID_NOT_FOUND here (admin clients then ask DescribeGroups).
//!
//! Needs DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED for that group); a group whose
//! assignment names a topic the principal may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED, as
//! Kafka.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::consumer_group_describe_response::{Assignment, DescribedGroup, Member, TopicPartitions};
use kafka_protocol::messages::{ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, TopicName};

use super::{str_bytes, Access, RequestContext};
use crate::group::assignor;
use crate::metadata::acls::{AclOperation, ResourceType};
use crate::metadata::image::MetadataImage;

pub fn handle(ctx: &RequestContext, request: ConsumerGroupDescribeRequest) -> ConsumerGroupDescribeResponse {
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
            if let Some((error, message)) = refusal(access, &id.0, []) {
                return failed(error, message);
            }
            let summary = match broker.groups.describe_consumer_group(&id.0) {
                Ok(summary) => summary,
                Err((error, message)) => return failed(error, message),
            };
            let assigned = summary
                .members
                .iter()
                .flat_map(|m| m.assignment.keys().chain(m.target.keys()))
                .filter_map(|t| image.topic_by_id(t))
                .map(|t| t.name.as_str());
            if let Some((error, message)) = refusal(access, &id.0, assigned) {
                return failed(error, message);
            }
            group
                .with_group_state(str_bytes(summary.state))
                .with_group_epoch(summary.group_epoch)
                .with_assignment_epoch(summary.assignment_epoch)
                .with_assignor_name(str_bytes(summary.assignor))
                .with_authorized_operations(operations(access, request.include_authorized_operations, &id.0))
                .with_members(
                    summary
                        .members
                        .into_iter()
                        .map(|m| {
                            Member::default()
                                .with_member_id(str_bytes(m.member_id))
                                .with_instance_id(m.instance_id.map(str_bytes))
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
                                .with_subscribed_topic_regex(m.subscribed_topic_regex.map(str_bytes))
                                .with_assignment(assignment(&image, &m.assignment))
                                .with_target_assignment(assignment(&image, &m.target))
                                // Kafka's member types: 0 classic protocol, 1 consumer protocol.
                                .with_member_type(if m.classic { 0 } else { 1 })
                        })
                        .collect(),
                )
        })
        .collect();
    ConsumerGroupDescribeResponse::default().with_groups(groups)
}

/// Why `access` may not see group `group_id`, whose members are assigned or targeted partitions of
/// `assigned`, if it may not: DESCRIBE on the group, then on every such topic.
fn refusal<'n>(
    access: Access<'_>,
    group_id: &str,
    assigned: impl IntoIterator<Item = &'n str>,
) -> Option<(ResponseError, String)> {
    if !access.authorize(AclOperation::Describe, ResourceType::Group, group_id) {
        return Some((ResponseError::GroupAuthorizationFailed, String::new()));
    }
    let mut assigned = assigned.into_iter();
    assigned
        .any(|name| !access.authorize(AclOperation::Describe, ResourceType::Topic, name))
        .then(|| {
            (
                ResponseError::TopicAuthorizationFailed,
                "The group has assigned topic partitions that the principal may not describe.".into(),
            )
        })
}

fn operations(access: Access<'_>, wanted: bool, group_id: &str) -> i32 {
    if wanted {
        access.operations(ResourceType::Group, group_id)
    } else {
        i32::MIN
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::testing::Acls;

    #[test]
    fn describing_a_group_needs_describe_on_it_and_on_every_topic_its_members_hold() {
        let acls = Acls::none()
            .allow(ResourceType::Group, "g", AclOperation::Describe)
            .allow(ResourceType::Group, "joined", AclOperation::Read)
            .allow(ResourceType::Group, "other", AclOperation::DescribeConfigs)
            .allow(ResourceType::Topic, "orders", AclOperation::Describe);
        assert_eq!(refusal(acls.access(), "g", ["orders", "orders"]), None);
        assert_eq!(refusal(acls.access(), "joined", []), None, "READ implies DESCRIBE");
        assert_eq!(
            refusal(acls.access(), "other", []),
            Some((ResponseError::GroupAuthorizationFailed, String::new()))
        );
        assert_eq!(
            refusal(acls.access(), "unknown", ["orders"]).map(|(e, _)| e),
            Some(ResponseError::GroupAuthorizationFailed),
            "a group the principal may not see is refused before anything about it is looked up"
        );
        assert_eq!(
            refusal(acls.access(), "g", ["orders", "secrets"]).map(|(e, _)| e),
            Some(ResponseError::TopicAuthorizationFailed)
        );
    }
}
