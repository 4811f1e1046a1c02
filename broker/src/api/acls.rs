//! DescribeAcls, CreateAcls and DeleteAcls without an authorizer: every request is answered
//! with SECURITY_DISABLED, as Kafka answers when no `authorizer.class.name` is set. Kafka
//! advertises these APIs anyway, and clients that pin a Kafka version send them without asking
//! ApiVersions, so an answer beats a closed connection.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::DeleteAclsFilterResult;
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse, DescribeAclsRequest,
    DescribeAclsResponse,
};

use super::str_bytes;

const NO_AUTHORIZER: &str =
    "Sluice has no authorizer: ACLs cannot be described, created or deleted, and every client may use every resource";

fn disabled() -> i16 {
    ResponseError::SecurityDisabled.code()
}

pub fn describe(_request: DescribeAclsRequest) -> DescribeAclsResponse {
    DescribeAclsResponse::default()
        .with_error_code(disabled())
        .with_error_message(Some(str_bytes(NO_AUTHORIZER)))
}

/// One result per requested creation, each refused.
pub fn create(request: CreateAclsRequest) -> CreateAclsResponse {
    let results = request
        .creations
        .iter()
        .map(|_| {
            AclCreationResult::default()
                .with_error_code(disabled())
                .with_error_message(Some(str_bytes(NO_AUTHORIZER)))
        })
        .collect();
    CreateAclsResponse::default().with_results(results)
}

/// One result per requested filter, each refused.
pub fn delete(request: DeleteAclsRequest) -> DeleteAclsResponse {
    let results = request
        .filters
        .iter()
        .map(|_| {
            DeleteAclsFilterResult::default()
                .with_error_code(disabled())
                .with_error_message(Some(str_bytes(NO_AUTHORIZER)))
        })
        .collect();
    DeleteAclsResponse::default().with_filter_results(results)
}
