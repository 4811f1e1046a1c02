//! ListGroups: the groups this broker coordinates (admin clients ask every broker), with
//! Kafka's state filter (v4+) and type filter (v5+; every group here is "classic").

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{GroupId, ListGroupsRequest, ListGroupsResponse};

use super::str_bytes;
use crate::broker::Broker;

const GROUP_TYPE: &str = "classic";

pub fn handle(broker: &Broker, request: ListGroupsRequest) -> ListGroupsResponse {
    let (groups, loading) = broker.groups.list_groups();
    let wants_type =
        request.types_filter.is_empty() || request.types_filter.iter().any(|t| t.eq_ignore_ascii_case(GROUP_TYPE));
    let listed = groups
        .into_iter()
        .filter(|_| wants_type)
        .filter(|(_, _, state)| {
            request.states_filter.is_empty()
                || request
                    .states_filter
                    .iter()
                    .any(|s| s.eq_ignore_ascii_case(state.name()))
        })
        .map(|(id, protocol_type, state)| {
            ListedGroup::default()
                .with_group_id(GroupId(str_bytes(id)))
                .with_protocol_type(str_bytes(protocol_type))
                .with_group_state(str_bytes(state.name()))
                .with_group_type(str_bytes(GROUP_TYPE))
        })
        .collect();
    let error = if loading {
        ResponseError::CoordinatorLoadInProgress.code()
    } else {
        0
    };
    ListGroupsResponse::default().with_error_code(error).with_groups(listed)
}
