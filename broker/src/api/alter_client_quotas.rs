//! AlterClientQuotas: set or remove quotas of `user`, `client-id` and `user` + `client-id`
//! entities (a null name is the default entity). Each entry is committed through the metadata
//! quorum on its own and answered with its own error, as Kafka does.

use std::collections::HashSet;
use std::sync::Arc;

use kafka_protocol::messages::alter_client_quotas_request::EntryData;
use kafka_protocol::messages::alter_client_quotas_response::{EntityData, EntryData as EntryResult};
use kafka_protocol::messages::{AlterClientQuotasRequest, AlterClientQuotasResponse};

use super::{commit_error, str_bytes};
use crate::broker::Broker;
use crate::controller::{self, quotas::parse_entity};
use crate::metadata::records::{MetadataCommand, QuotaEntity, QuotaValue};
use crate::metadata::CommitError;

pub async fn handle(broker: Arc<Broker>, request: AlterClientQuotasRequest) -> AlterClientQuotasResponse {
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
        results.push(match alter(&broker, entry, request.validate_only, &mut done).await {
            Ok(()) => result,
            Err((code, message)) => result
                .with_error_code(code)
                .with_error_message(Some(str_bytes(message))),
        });
    }
    AlterClientQuotasResponse::default().with_entries(results)
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
