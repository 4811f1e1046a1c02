//! DescribeGroups: state, protocol and members of each group (metadata and assignments only
//! while Stable, as Kafka reports them).
//!
//! Each group needs DESCRIBE, else GROUP_AUTHORIZATION_FAILED; its authorized operations
//! (v3+) are computed only when asked for, as Kafka.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::{DescribeGroupsRequest, DescribeGroupsResponse};

use super::{str_bytes, Access, RequestContext};
use crate::group::coordinator::GroupSummary;
use crate::metadata::acls::{AclOperation, ResourceType};

/// v6 (KIP-1043) answers an unknown group with GROUP_ID_NOT_FOUND instead of state "Dead",
/// and has an error message.
const FIRST_VERSION_WITH_NOT_FOUND: i16 = 6;
/// v3 brings authorized operations (KIP-430).
const FIRST_VERSION_WITH_AUTHORIZED_OPERATIONS: i16 = 3;

pub fn handle(ctx: &RequestContext, request: DescribeGroupsRequest) -> DescribeGroupsResponse {
    let version = ctx.version;
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    let access = session.access(&broker.security.authorizer, &image.acls);
    describe(access, request, version, |id| broker.groups.describe_group(id))
}

/// The answer, describing each group the principal may describe with `describe_group`.
fn describe(
    access: Access<'_>,
    request: DescribeGroupsRequest,
    version: i16,
    describe_group: impl Fn(&str) -> Result<Option<GroupSummary>, ResponseError>,
) -> DescribeGroupsResponse {
    let with_operations = request.include_authorized_operations && version >= FIRST_VERSION_WITH_AUTHORIZED_OPERATIONS;
    let groups = request
        .groups
        .into_iter()
        .map(|id| {
            let described = DescribedGroup::default().with_group_id(id.clone());
            if !access.authorize(AclOperation::Describe, ResourceType::Group, &id.0) {
                let message = access.denied(AclOperation::Describe, ResourceType::Group, &id.0);
                return described
                    .with_error_code(ResponseError::GroupAuthorizationFailed.code())
                    .with_error_message((version >= FIRST_VERSION_WITH_NOT_FOUND).then(|| str_bytes(message)));
            }
            let described = match describe_group(&id.0) {
                Err(error) => described
                    .with_error_code(error.code())
                    .with_group_state(str_bytes("Dead")),
                Ok(None) if version >= FIRST_VERSION_WITH_NOT_FOUND => described
                    .with_error_code(ResponseError::GroupIdNotFound.code())
                    .with_error_message(Some(str_bytes(format!("group {} does not exist", id.0))))
                    .with_group_state(str_bytes("Dead")),
                Ok(None) => described.with_group_state(str_bytes("Dead")),
                Ok(Some(summary)) => described
                    .with_group_state(str_bytes(summary.state.name()))
                    .with_protocol_type(str_bytes(summary.protocol_type))
                    .with_protocol_data(str_bytes(summary.protocol_name))
                    .with_members(
                        summary
                            .members
                            .into_iter()
                            .map(|m| {
                                DescribedGroupMember::default()
                                    .with_member_id(str_bytes(m.member_id))
                                    .with_group_instance_id(m.group_instance_id.map(str_bytes))
                                    .with_client_id(str_bytes(m.client_id))
                                    .with_client_host(str_bytes(m.client_host))
                                    .with_member_metadata(m.metadata)
                                    .with_member_assignment(m.assignment)
                            })
                            .collect(),
                    ),
            };
            if with_operations && described.error_code == 0 {
                let operations = access.operations(ResourceType::Group, &id.0);
                described.with_authorized_operations(operations)
            } else {
                described
            }
        })
        .collect();
    DescribeGroupsResponse::default().with_groups(groups)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::testing::Acls;
    use kafka_protocol::messages::GroupId;

    fn request(groups: &[&str]) -> DescribeGroupsRequest {
        DescribeGroupsRequest::default()
            .with_groups(groups.iter().map(|g| GroupId(str_bytes(*g))).collect())
            .with_include_authorized_operations(true)
    }

    #[test]
    fn groups_without_describe_are_refused_and_the_others_carry_the_principals_operations() {
        let acls = Acls::none().allow(ResourceType::Group, "g", AclOperation::Read);
        let response = describe(acls.access(), request(&["g", "h"]), 5, |_| Ok(None));
        let answers: Vec<(i16, i32)> = response
            .groups
            .iter()
            .map(|g| (g.error_code, g.authorized_operations))
            .collect();
        let read_and_describe = (1 << AclOperation::Read as i32) | (1 << AclOperation::Describe as i32);
        assert_eq!(
            answers,
            vec![
                (0, read_and_describe),
                (ResponseError::GroupAuthorizationFailed.code(), i32::MIN)
            ]
        );
        assert_eq!(response.groups[1].error_message, None, "no message field before v6");
        let v6 = describe(acls.access(), request(&["h"]), 6, |_| Ok(None));
        assert!(v6.groups[0].error_message.is_some());
        // Not asked for, or before v3: the schema default.
        let not_asked = describe(
            acls.access(),
            request(&["g"]).with_include_authorized_operations(false),
            5,
            |_| Ok(None),
        );
        assert_eq!(not_asked.groups[0].authorized_operations, i32::MIN);
        crate::api::testing::assert_encodes_at_every_version(kafka_protocol::messages::ApiKey::DescribeGroups, |v| {
            describe(acls.access(), request(&["g", "h"]), v, |_| Ok(None))
        });
    }
}
