//! FindCoordinator: where a consumer group's or transactional producer's coordinator lives.
//!
//! Group and transaction coordinators are not implemented yet, so every key is answered with
//! COORDINATOR_NOT_AVAILABLE (retriable) and a message saying why. The API is served anyway
//! because librdkafka enables LZ4 (and other features) only for brokers that list it.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};

use super::str_bytes;

/// v4 batches keys into `coordinator_keys` and answers per key.
const FIRST_BATCHED_VERSION: i16 = 4;
const NOT_YET: &str = "consumer groups and transactions are not supported by this broker yet";

pub fn handle(request: FindCoordinatorRequest, version: i16) -> FindCoordinatorResponse {
    let error = ResponseError::CoordinatorNotAvailable.code();
    if version < FIRST_BATCHED_VERSION {
        return FindCoordinatorResponse::default()
            .with_error_code(error)
            .with_error_message(Some(str_bytes(NOT_YET)))
            .with_node_id(BrokerId(-1))
            .with_port(-1);
    }
    let coordinators = request
        .coordinator_keys
        .into_iter()
        .map(|key| {
            Coordinator::default()
                .with_key(key)
                .with_node_id(BrokerId(-1))
                .with_port(-1)
                .with_error_code(error)
                .with_error_message(Some(str_bytes(NOT_YET)))
        })
        .collect();
    FindCoordinatorResponse::default().with_coordinators(coordinators)
}
