//! AlterClientQuotas: set or remove quotas of `user`, `client-id` and `user` + `client-id`
//! entities (a null name is the default entity). Each entry is committed through the metadata
//! quorum on its own and answered with its own error, as Kafka does. Needs ALTER_CONFIGS on
//! the cluster, else every entry is answered CLUSTER_AUTHORIZATION_FAILED.

use std::collections::HashSet;

use kafka_protocol::messages::alter_client_quotas_request::EntryData;
use kafka_protocol::messages::alter_client_quotas_response::{EntityData, EntryData as EntryResult};
use kafka_protocol::messages::{AlterClientQuotasRequest, AlterClientQuotasResponse};

use super::{commit_error, str_bytes, Access, RequestContext};
use crate::broker::Broker;
use crate::controller::{self, quotas::parse_entity};
use crate::metadata::acls::AclOperation;
use crate::metadata::records::{MetadataCommand, QuotaEntity, QuotaValue};
use crate::metadata::CommitError;

pub async fn handle(ctx: RequestContext, request: AlterClientQuotasRequest) -> AlterClientQuotasResponse {
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    let refusal = refusal(session.access(&broker.security.authorizer, &image.acls));
    let mut done: HashSet<QuotaEntity> = HashSet::new();
    let mut results = Vec::with_capacity(request.entries.len());
    for entry in &request.entries {
        let entity = entry
            .entity
            .iter()
            .map(|e| {
                EntityData::default()
                    .with_entity_type(e.entity_type.clone())
                    .with_entity_name(e.entity_name.clone())
            })
            .collect();
        let result = EntryResult::default().with_entity(entity);
        let altered = match &refusal {
            Some(refused) => Err(refused.clone()),
            None => alter(&broker, entry, request.validate_only, &mut done).await,
        };
        results.push(match altered {
            Ok(()) => result,
            Err((code, message)) => result
                .with_error_code(code)
                .with_error_message(Some(str_bytes(message))),
        });
    }
    AlterClientQuotasResponse::default().with_entries(results)
}

/// Why the principal may not alter quotas (ALTER_CONFIGS on the cluster), if it may not.
fn refusal(access: Access<'_>) -> Option<(i16, String)> {
    (!access.authorize_cluster(AclOperation::AlterConfigs)).then(|| {
        (
            kafka_protocol::error::ResponseError::ClusterAuthorizationFailed.code(),
            access.denied_cluster(AclOperation::AlterConfigs),
        )
    })
}

/// Validates and commits one entry; `done` holds the entities this request already altered.
async fn alter(
    broker: &Broker,
    entry: &EntryData,
    validate_only: bool,
    done: &mut HashSet<QuotaEntity>,
) -> Result<(), (i16, String)> {
    let refused = |e: CommitError| commit_error(&e);
    let entity = parse_entity(entry.entity.iter().map(|e| (&*e.entity_type, e.entity_name.as_deref())))
        .map_err(|e| refused(CommitError::Refused(e)))?;
    if !done.insert(entity.clone()) {
        return Err((
            kafka_protocol::error::ResponseError::InvalidRequest.code(),
            "Ignoring duplicate entity: it appears more than once in this request".to_string(),
        ));
    }
    let ops: Vec<(String, Option<QuotaValue>)> = entry
        .ops
        .iter()
        .map(|op| (op.key.to_string(), (!op.remove).then_some(QuotaValue(op.value))))
        .collect();
    if validate_only {
        return controller::alter_client_quotas(&broker.metadata.image(), &entity, &ops)
            .map(|_| ())
            .map_err(|e| refused(CommitError::Refused(e)));
    }
    broker
        .commit(MetadataCommand::AlterClientQuotas { entity, ops })
        .await
        .map(|_| ())
        .map_err(refused)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::testing::Acls;

    #[test]
    fn altering_quotas_needs_alter_configs_on_the_cluster() {
        let refused = refusal(Acls::none().allow_cluster(AclOperation::DescribeConfigs).access());
        assert_eq!(
            refused.map(|r| r.0),
            Some(kafka_protocol::error::ResponseError::ClusterAuthorizationFailed.code())
        );
        assert_eq!(
            refusal(Acls::none().allow_cluster(AclOperation::AlterConfigs).access()),
            None
        );
    }
}
