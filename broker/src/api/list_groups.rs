//! ListGroups: the groups this broker coordinates (admin clients ask every broker), with
//! Kafka's state filter (v4+) and type filter (v5+: `classic` or KIP-848's `consumer`).
//!
//! DESCRIBE on the cluster lists every group; without it only the groups the principal may
//! DESCRIBE are listed, the others silently left out, as Kafka.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{GroupId, ListGroupsRequest, ListGroupsResponse};

use super::{str_bytes, Access, RequestContext};
use crate::metadata::acls::{AclOperation, ResourceType};

pub fn handle(ctx: &RequestContext, request: ListGroupsRequest) -> ListGroupsResponse {
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    let listable = listable(session.access(&broker.security.authorizer, &image.acls));
    let (groups, loading) = broker.groups.list_groups();
    let listed = groups
        .into_iter()
        .filter(|g| {
            request.types_filter.is_empty() || request.types_filter.iter().any(|t| t.eq_ignore_ascii_case(g.group_type))
        })
        .filter(|g| listable(&g.group_id))
        .filter(|g| request.states_filter.is_empty() || request.states_filter.iter().any(|s| s.eq_ignore_ascii_case(g.state)))
        .map(|g| {
            ListedGroup::default()
                .with_group_id(GroupId(str_bytes(g.group_id)))
                .with_protocol_type(str_bytes(g.protocol_type))
                .with_group_state(str_bytes(g.state))
                .with_group_type(str_bytes(g.group_type))
        })
        .collect();
    let error = if loading {
        ResponseError::CoordinatorLoadInProgress.code()
    } else {
        0
    };
    ListGroupsResponse::default().with_error_code(error).with_groups(listed)
}

/// Which groups the principal may see listed.
fn listable(access: Access<'_>) -> impl Fn(&str) -> bool + '_ {
    let every_group = access.check_cluster(AclOperation::Describe);
    move |id| every_group || access.check(AclOperation::Describe, ResourceType::Group, id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::testing::Acls;

    #[test]
    fn only_groups_the_principal_may_describe_are_listed_without_describe_on_the_cluster() {
        let acls = Acls::none().allow(ResourceType::Group, "g", AclOperation::Read);
        let listed = listable(acls.access());
        assert!(listed("g"));
        assert!(!listed("h"));
        let operators = Acls::none().allow_cluster(AclOperation::Describe);
        assert!(listable(operators.access())("h"));
    }
}
