//! EndTxn: commit or abort the producer's open transaction. Answered once the coordinator has
//! written PrepareCommit/PrepareAbort to `__transaction_state` and its ISR has it; the markers
//! follow in the background, as Kafka does. v5+ is transactions v2 (KIP-890 part 2; clients
//! send it only when `transaction.version` 2 is finalized): the epoch is bumped at every
//! EndTxn and the answer carries the producer id and epoch the client continues with.
//!
//! Needs WRITE on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED).
//! PRODUCER_FENCED is answered as INVALID_PRODUCER_EPOCH below v2, which older clients know.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{EndTxnRequest, EndTxnResponse, ProducerId};

use super::RequestContext;
use crate::metadata::acls::{AclOperation, ResourceType};

/// The first version whose clients know PRODUCER_FENCED.
const PRODUCER_FENCED_SINCE: i16 = 2;
/// The first version of transactions v2 (Kafka's `clientTransactionVersion` is TV_2 from it).
pub(crate) const TV2_SINCE: i16 = 5;

pub async fn handle(ctx: RequestContext, request: EndTxnRequest) -> EndTxnResponse {
    let version = ctx.version;
    let RequestContext { broker, session, .. } = ctx;
    let id = request.transactional_id.0.as_str();
    let allowed = {
        let image = broker.metadata.image();
        session.access(&broker.security.authorizer, &image.acls).authorize(
            AclOperation::Write,
            ResourceType::TransactionalId,
            id,
        )
    };
    let response = EndTxnResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    if !allowed {
        return response.with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code());
    }
    let tv2 = version >= TV2_SINCE;
    let allocate = || async { broker.next_producer_id().await.map_err(|e| commit_response_error(&e)) };
    let result = broker
        .txn
        .end_txn(
            id,
            request.producer_id.0,
            request.producer_epoch,
            request.committed,
            tv2,
            allocate,
        )
        .await;
    match result {
        // The response carries them from v5 on; below it they are not encoded.
        Ok(next) if tv2 => response
            .with_producer_id(ProducerId(next.producer_id))
            .with_producer_epoch(next.producer_epoch),
        Ok(_) => response,
        Err(e) => response.with_error_code(fenced_for(e, version, PRODUCER_FENCED_SINCE).code()),
    }
}

/// A failed producer-id allocation as the client's error (InitProducerId's too).
pub(crate) fn commit_response_error(e: &crate::metadata::CommitError) -> ResponseError {
    ResponseError::try_from_code(super::commit_error(e).0).unwrap_or(ResponseError::UnknownServerError)
}

/// Kafka's down-conversion of PRODUCER_FENCED for clients older than `since`.
pub(crate) fn fenced_for(error: ResponseError, version: i16, since: i16) -> ResponseError {
    if error == ResponseError::ProducerFenced && version < since {
        ResponseError::InvalidProducerEpoch
    } else {
        error
    }
}
