//! DescribeAcls, CreateAcls and DeleteAcls. Without an authorizer they answer
//! SECURITY_DISABLED, as Kafka does when no `authorizer.class.name` is set. With one, describing
//! needs DESCRIBE and changing needs ALTER on the cluster (else CLUSTER_AUTHORIZATION_FAILED);
//! ACLs live in the metadata quorum, so a change is on every broker once it is answered here
//! and applied there.

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::delete_acls_response::{DeleteAclsFilterResult, DeleteAclsMatchingAcl};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse, DescribeAclsRequest,
    DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::{commit_error, str_bytes, RequestContext, Session};
use crate::broker::Broker;
use crate::controller::acls::{check_new_acl, CLUSTER_NAME};
use crate::metadata::acls::{
    AclBinding, AclFilter, AclOperation, AclPermission, PatternFilter, PatternType, ResourceType,
};
use crate::metadata::outcome::Outcome;
use crate::metadata::records::MetadataCommand;

const NO_AUTHORIZER: &str =
    "No Authorizer is configured on the broker: ACLs cannot be described, created or deleted; set authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer to enforce them";

type Refusal = (i16, String);

fn disabled() -> Refusal {
    (ResponseError::SecurityDisabled.code(), NO_AUTHORIZER.to_string())
}

fn not_authorized(operation: AclOperation) -> Refusal {
    (
        ResponseError::ClusterAuthorizationFailed.code(),
        format!(
            "the principal may not {} ACLs: it needs {} on the cluster",
            if operation == AclOperation::Describe {
                "describe"
            } else {
                "change"
            },
            operation.name()
        ),
    )
}

/// Whether the ACL APIs may be used by this session with `operation` on the cluster.
fn permitted(broker: &Broker, session: &Session, operation: AclOperation) -> Result<(), Refusal> {
    let security = &broker.security;
    if !security.authorizer.is_enabled() {
        return Err(disabled());
    }
    let image = broker.metadata.image();
    if !security.authorizer.authorize(
        &image.acls,
        session.requester(),
        operation,
        ResourceType::Cluster,
        CLUSTER_NAME,
    ) {
        return Err(not_authorized(operation));
    }
    Ok(())
}

fn invalid(message: impl Into<String>) -> Refusal {
    (ResponseError::InvalidRequest.code(), message.into())
}

/// A filter from the wire's codes (ANY is 1, MATCH 2 for the pattern type; version 0 has no
/// pattern type and means LITERAL).
#[allow(clippy::too_many_arguments)]
fn parse_filter(
    version: i16,
    resource_type: i8,
    resource_name: Option<&StrBytes>,
    pattern_type: i8,
    principal: Option<&StrBytes>,
    host: Option<&StrBytes>,
    operation: i8,
    permission: i8,
) -> Result<AclFilter, Refusal> {
    let any_or = |code: i8, parse: &dyn Fn(i8) -> bool| code == 1 || parse(code);
    if !any_or(resource_type, &|c| ResourceType::from_code(c).is_some())
        || !any_or(operation, &|c| AclOperation::from_code(c).is_some())
        || !any_or(permission, &|c| AclPermission::from_code(c).is_some())
    {
        return Err(invalid(
            "the filter has an unknown resource type, operation or permission type",
        ));
    }
    let pattern = if version == 0 {
        PatternFilter::Exactly(PatternType::Literal)
    } else {
        PatternFilter::from_code(pattern_type).ok_or_else(|| invalid("the filter has an unknown pattern type"))?
    };
    Ok(AclFilter {
        resource_type: ResourceType::from_code(resource_type),
        resource_name: resource_name.map(|n| n.to_string()),
        pattern,
        principal: principal.map(|p| p.to_string()),
        host: host.map(|h| h.to_string()),
        operation: AclOperation::from_code(operation),
        permission: AclPermission::from_code(permission),
    })
}

pub fn describe(ctx: &RequestContext, request: DescribeAclsRequest) -> DescribeAclsResponse {
    let version = ctx.version;
    let RequestContext { broker, session, .. } = ctx;
    match describe_acls(broker, session, &request, version) {
        Ok(resources) => DescribeAclsResponse::default().with_resources(resources),
        Err((error, message)) => DescribeAclsResponse::default()
            .with_error_code(error)
            .with_error_message(Some(str_bytes(message))),
    }
}

fn describe_acls(
    broker: &Broker,
    session: &Session,
    r: &DescribeAclsRequest,
    version: i16,
) -> Result<Vec<DescribeAclsResource>, Refusal> {
    permitted(broker, session, AclOperation::Describe)?;
    let filter = parse_filter(
        version,
        r.resource_type_filter,
        r.resource_name_filter.as_ref(),
        r.pattern_type_filter,
        r.principal_filter.as_ref(),
        r.host_filter.as_ref(),
        r.operation,
        r.permission_type,
    )?;
    let image = broker.metadata.image();
    let mut by_resource: BTreeMap<(ResourceType, &str, PatternType), Vec<AclDescription>> = BTreeMap::new();
    for (_, acl) in image.acls.iter().filter(|(_, b)| filter.matches(b)) {
        by_resource
            .entry((acl.resource_type, acl.resource_name.as_str(), acl.pattern_type))
            .or_default()
            .push(
                AclDescription::default()
                    .with_principal(str_bytes(acl.principal.clone()))
                    .with_host(str_bytes(acl.host.clone()))
                    .with_operation(acl.operation as i8)
                    .with_permission_type(acl.permission as i8),
            );
    }
    Ok(by_resource
        .into_iter()
        .map(|((resource_type, name, pattern), acls)| {
            DescribeAclsResource::default()
                .with_resource_type(resource_type as i8)
                .with_resource_name(str_bytes(name))
                .with_pattern_type(pattern as i8)
                .with_acls(acls)
        })
        .collect())
}

/// One result per requested creation, in order.
pub async fn create(ctx: RequestContext, request: CreateAclsRequest) -> CreateAclsResponse {
    let version = ctx.version;
    let RequestContext { broker, session, .. } = ctx;
    let refused = |e: &Refusal| {
        AclCreationResult::default()
            .with_error_code(e.0)
            .with_error_message(Some(str_bytes(e.1.clone())))
    };
    if let Err(e) = permitted(&broker, &session, AclOperation::Alter) {
        return CreateAclsResponse::default().with_results(request.creations.iter().map(|_| refused(&e)).collect());
    }
    let parsed: Vec<Result<AclBinding, Refusal>> = request
        .creations
        .iter()
        .map(|c| {
            let binding = AclBinding {
                resource_type: ResourceType::from_code(c.resource_type)
                    .ok_or_else(|| invalid(format!("resource type {} cannot take an ACL", c.resource_type)))?,
                resource_name: c.resource_name.to_string(),
                pattern_type: if version == 0 {
                    PatternType::Literal
                } else {
                    PatternType::from_code(c.resource_pattern_type)
                        .ok_or_else(|| invalid("an ACL's pattern type must be LITERAL or PREFIXED"))?
                },
                principal: c.principal.to_string(),
                host: c.host.to_string(),
                operation: AclOperation::from_code(c.operation)
                    .ok_or_else(|| invalid(format!("operation {} cannot be granted", c.operation)))?,
                permission: AclPermission::from_code(c.permission_type)
                    .ok_or_else(|| invalid("an ACL's permission type must be ALLOW or DENY"))?,
            };
            check_new_acl(&binding).map_err(|e| (e.code(), e.message))?;
            Ok(binding)
        })
        .collect();
    let acls: Vec<(Uuid, AclBinding)> = parsed
        .iter()
        .filter_map(|p| p.as_ref().ok())
        .map(|b| (Uuid::new_v4(), b.clone()))
        .collect();
    let committed = if acls.is_empty() {
        Ok(())
    } else {
        broker
            .commit(MetadataCommand::CreateAcls { acls })
            .await
            .map(|_| ())
            .map_err(|e| commit_error(&e))
    };
    let results = parsed
        .iter()
        .map(|p| match (p, &committed) {
            (Err(e), _) | (Ok(_), Err(e)) => refused(e),
            (Ok(_), Ok(())) => AclCreationResult::default(),
        })
        .collect();
    CreateAclsResponse::default().with_results(results)
}

/// One result per requested filter, in order, each with the ACLs it deleted.
pub async fn delete(ctx: RequestContext, request: DeleteAclsRequest) -> DeleteAclsResponse {
    let version = ctx.version;
    let RequestContext { broker, session, .. } = ctx;
    let refused = |e: &Refusal| {
        DeleteAclsFilterResult::default()
            .with_error_code(e.0)
            .with_error_message(Some(str_bytes(e.1.clone())))
    };
    if let Err(e) = permitted(&broker, &session, AclOperation::Alter) {
        return DeleteAclsResponse::default()
            .with_filter_results(request.filters.iter().map(|_| refused(&e)).collect());
    }
    let parse = |f: &DeleteAclsFilter| {
        parse_filter(
            version,
            f.resource_type_filter,
            f.resource_name_filter.as_ref(),
            f.pattern_type_filter,
            f.principal_filter.as_ref(),
            f.host_filter.as_ref(),
            f.operation,
            f.permission_type,
        )
    };
    let parsed: Vec<Result<AclFilter, Refusal>> = request.filters.iter().map(parse).collect();
    let filters: Vec<AclFilter> = parsed.iter().filter_map(|p| p.as_ref().ok()).cloned().collect();
    let deleted: Result<Vec<Vec<AclBinding>>, Refusal> = if filters.is_empty() {
        Ok(Vec::new())
    } else {
        match broker.commit(MetadataCommand::DeleteAcls { filters }).await {
            Ok((_, Outcome::AclsDeleted(per_filter))) => Ok(per_filter),
            Ok((_, other)) => Err((
                ResponseError::UnknownServerError.code(),
                format!("unexpected outcome {other:?}"),
            )),
            Err(e) => Err(commit_error(&e)),
        }
    };
    let mut matched = deleted.as_ref().ok().map(|d| d.iter());
    let results = parsed
        .iter()
        .map(|p| match (p, &deleted) {
            (Err(e), _) | (Ok(_), Err(e)) => refused(e),
            (Ok(_), Ok(_)) => {
                let acls = matched.as_mut().and_then(|m| m.next()).cloned().unwrap_or_default();
                DeleteAclsFilterResult::default().with_matching_acls(
                    acls.iter()
                        .map(|acl| {
                            DeleteAclsMatchingAcl::default()
                                .with_resource_type(acl.resource_type as i8)
                                .with_resource_name(str_bytes(acl.resource_name.clone()))
                                .with_pattern_type(acl.pattern_type as i8)
                                .with_principal(str_bytes(acl.principal.clone()))
                                .with_host(str_bytes(acl.host.clone()))
                                .with_operation(acl.operation as i8)
                                .with_permission_type(acl.permission as i8)
                        })
                        .collect(),
                )
            }
        })
        .collect();
    DeleteAclsResponse::default().with_filter_results(results)
}
