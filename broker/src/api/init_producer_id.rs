//! InitProducerId: a producer id and epoch for an idempotent producer (the default in the
//! Java client since 3.0 and in franz-go). Transactions are not supported yet.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use super::commit_error;
use crate::broker::Broker;

pub async fn handle(broker: Arc<Broker>, request: InitProducerIdRequest) -> InitProducerIdResponse {
    let response = InitProducerIdResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    if request.transactional_id.as_ref().is_some_and(|id| !id.0.is_empty()) {
        tracing::debug!("refusing a transactional InitProducerId: transactions are not supported yet");
        return response.with_error_code(ResponseError::CoordinatorNotAvailable.code());
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
