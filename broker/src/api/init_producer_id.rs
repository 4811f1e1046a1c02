//! InitProducerId: a producer id and epoch for an idempotent producer (the default in the
//! Java client since 3.0 and in franz-go), or for a transactional id from its transaction
//! coordinator (a bumped epoch per call, fencing the previous producer; an open transaction of
//! that producer is aborted first and the caller told CONCURRENT_TRANSACTIONS, to retry).
//!
//! As Kafka: a transactional id needs WRITE on it (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
//! without one, IDEMPOTENT_WRITE on the cluster or (KIP-679) WRITE on any topic (else
//! CLUSTER_AUTHORIZATION_FAILED). An empty transactional id counts as none, as below.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use super::end_txn::{commit_response_error, fenced_for};
use super::{commit_error, Access, RequestContext};
use crate::metadata::acls::{AclOperation, ResourceType};

/// The first version whose clients know PRODUCER_FENCED.
const PRODUCER_FENCED_SINCE: i16 = 4;

pub async fn handle(ctx: RequestContext, request: InitProducerIdRequest) -> InitProducerIdResponse {
    let version = ctx.version;
    let RequestContext { broker, session, .. } = ctx;
    let response = InitProducerIdResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let transactional_id = request
        .transactional_id
        .as_ref()
        .map(|id| id.0.as_str())
        .filter(|id| !id.is_empty());
    let refused = {
        let image = broker.metadata.image();
        refusal(
            session.access(&broker.security.authorizer, &image.acls),
            transactional_id,
        )
    };
    if let Some(error) = refused {
        return response.with_error_code(error.code());
    }
    if let Some(id) = transactional_id {
        let expected = (request.producer_id.0 >= 0 && request.producer_epoch >= 0)
            .then_some((request.producer_id.0, request.producer_epoch));
        let allocate = || async { broker.next_producer_id().await.map_err(|e| commit_response_error(&e)) };
        return match broker
            .txn
            .init_producer_id(id, request.transaction_timeout_ms, expected, allocate)
            .await
        {
            Ok(assigned) => response
                .with_producer_id(ProducerId(assigned.producer_id))
                .with_producer_epoch(assigned.producer_epoch),
            Err(e) => response.with_error_code(fenced_for(e, version, PRODUCER_FENCED_SINCE).code()),
        };
    }
    // KIP-360: a producer that lost track of its sequences asks for a bumped epoch.
    if request.producer_id.0 >= 0 && request.producer_epoch >= 0 && request.producer_epoch < i16::MAX - 1 {
        return response
            .with_producer_id(request.producer_id)
            .with_producer_epoch(request.producer_epoch + 1);
    }
    match broker.next_producer_id().await {
        Ok(id) => response.with_producer_id(ProducerId(id)).with_producer_epoch(0),
        Err(e) => response.with_error_code(commit_error(&e).0),
    }
}

/// Why the principal may not have a producer id, if it may not.
fn refusal(access: Access<'_>, transactional_id: Option<&str>) -> Option<ResponseError> {
    match transactional_id {
        Some(id) => (!access.authorize(AclOperation::Write, ResourceType::TransactionalId, id))
            .then_some(ResponseError::TransactionalIdAuthorizationFailed),
        None => {
            let idempotent = access.check_cluster(AclOperation::IdempotentWrite)
                || access.check_any(AclOperation::Write, ResourceType::Topic);
            (!idempotent).then_some(ResponseError::ClusterAuthorizationFailed)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::testing::Acls;

    #[test]
    fn an_idempotent_producer_needs_idempotent_write_on_the_cluster_or_write_on_a_topic() {
        let refused = Some(ResponseError::ClusterAuthorizationFailed);
        assert_eq!(refusal(Acls::none().access(), None), refused);
        let readers = Acls::none().allow(ResourceType::Topic, "orders", AclOperation::Read);
        assert_eq!(refusal(readers.access(), None), refused);
        let writers = Acls::none().allow(ResourceType::Topic, "orders", AclOperation::Write);
        assert_eq!(refusal(writers.access(), None), None);
        let idempotent = Acls::none().allow_cluster(AclOperation::IdempotentWrite);
        assert_eq!(refusal(idempotent.access(), None), None);
    }

    #[test]
    fn a_transactional_producer_needs_write_on_its_transactional_id() {
        let acls = Acls::none()
            .allow(ResourceType::TransactionalId, "tx", AclOperation::Write)
            .allow_cluster(AclOperation::IdempotentWrite);
        assert_eq!(refusal(acls.access(), Some("tx")), None);
        assert_eq!(
            refusal(acls.access(), Some("other")),
            Some(ResponseError::TransactionalIdAuthorizationFailed)
        );
    }
}
