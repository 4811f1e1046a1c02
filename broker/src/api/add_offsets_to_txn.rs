//! AddOffsetsToTxn: the group's `__consumer_offsets` partition joins the producer's
//! transaction, so the offsets its TxnOffsetCommit writes there are committed or aborted with
//! the transaction's records.
//!
//! Needs WRITE on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and READ on
//! the group (else GROUP_AUTHORIZATION_FAILED), as Kafka checks them.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{AddOffsetsToTxnRequest, AddOffsetsToTxnResponse};

use super::end_txn::fenced_for;
use super::RequestContext;
use crate::controller::OFFSETS_TOPIC;
use crate::metadata::acls::{AclOperation, ResourceType};

const PRODUCER_FENCED_SINCE: i16 = 2;

pub async fn handle(ctx: RequestContext, request: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse {
    let version = ctx.version;
    let RequestContext { broker, session, .. } = ctx;
    let id = request.transactional_id.0.as_str();
    let group = request.group_id.0.as_str();
    let refused = {
        let image = broker.metadata.image();
        let access = session.access(&broker.security.authorizer, &image.acls);
        if !access.authorize(AclOperation::Write, ResourceType::TransactionalId, id) {
            Some(ResponseError::TransactionalIdAuthorizationFailed)
        } else if !access.authorize(AclOperation::Read, ResourceType::Group, group) {
            Some(ResponseError::GroupAuthorizationFailed)
        } else {
            None
        }
    };
    if let Some(error) = refused {
        return AddOffsetsToTxnResponse::default().with_error_code(error.code());
    }
    let partition = (OFFSETS_TOPIC.to_string(), broker.groups.partition_for(group));
    let result = broker
        .txn
        .add_partitions(id, request.producer_id.0, request.producer_epoch, &[partition], false)
        .await;
    AddOffsetsToTxnResponse::default().with_error_code(match result {
        Ok(()) => 0,
        Err(e) => fenced_for(e, version, PRODUCER_FENCED_SINCE).code(),
    })
}
