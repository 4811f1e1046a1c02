//! DescribeGroups: state, protocol and members of each group (metadata and assignments only
//! while Stable, as Kafka reports them).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::{DescribeGroupsRequest, DescribeGroupsResponse};

use super::str_bytes;
use crate::broker::Broker;

/// v6 (KIP-1043) answers an unknown group with GROUP_ID_NOT_FOUND instead of state "Dead".
const FIRST_VERSION_WITH_NOT_FOUND: i16 = 6;
/// Kafka's group ACL operations: READ (3), DELETE (6), DESCRIBE (8); no ACLs, so all allowed.
const GROUP_OPERATIONS: i32 = (1 << 3) | (1 << 6) | (1 << 8);

pub fn handle(broker: &Broker, request: DescribeGroupsRequest, version: i16) -> DescribeGroupsResponse {
    let operations = if request.include_authorized_operations {
        GROUP_OPERATIONS
    } else {
        i32::MIN
    };
    let groups = request
        .groups
        .into_iter()
        .map(|id| {
            let described = DescribedGroup::default()
                .with_group_id(id.clone())
                .with_authorized_operations(operations);
            match broker.groups.describe_group(&id.0) {
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
            }
        })
        .collect();
    DescribeGroupsResponse::default().with_groups(groups)
}
