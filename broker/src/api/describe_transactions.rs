//! DescribeTransactions: each named transactional id's state from its coordinator (this
//! broker must coordinate it: else NOT_COORDINATOR, and the admin client asks the right one).
//!
//! Needs DESCRIBE on each transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED for
//! it); the partitions listed leave out topics the principal may not DESCRIBE, as Kafka.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::{DescribeTransactionsRequest, DescribeTransactionsResponse, ProducerId, TopicName};

use super::{str_bytes, RequestContext};
use crate::metadata::acls::{AclOperation, ResourceType};

pub fn handle(ctx: &RequestContext, request: DescribeTransactionsRequest) -> DescribeTransactionsResponse {
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    let access = session.access(&broker.security.authorizer, &image.acls);
    let states = request
        .transactional_ids
        .into_iter()
        .map(|id| {
            let failed = |error: ResponseError| {
                TransactionState::default()
                    .with_transactional_id(id.clone())
                    .with_error_code(error.code())
                    .with_transaction_state(str_bytes(""))
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1)
                    .with_transaction_start_time_ms(-1)
            };
            if !access.authorize(AclOperation::Describe, ResourceType::TransactionalId, id.0.as_str()) {
                return failed(ResponseError::TransactionalIdAuthorizationFailed);
            }
            match broker.txn.describe(id.0.as_str()) {
                Err(e) => failed(e),
                Ok(view) => {
                    let topics = view
                        .partitions
                        .into_iter()
                        .filter(|(topic, _)| access.check(AclOperation::Describe, ResourceType::Topic, topic))
                        .map(|(topic, partitions)| {
                            TopicData::default()
                                .with_topic(TopicName(str_bytes(topic)))
                                .with_partitions(partitions)
                        })
                        .collect();
                    TransactionState::default()
                        .with_transactional_id(id)
                        .with_transaction_state(str_bytes(view.state.name()))
                        .with_transaction_timeout_ms(view.timeout_ms)
                        .with_transaction_start_time_ms(view.start_ms)
                        .with_producer_id(ProducerId(view.producer_id))
                        .with_producer_epoch(view.producer_epoch)
                        .with_topics(topics)
                }
            }
        })
        .collect();
    DescribeTransactionsResponse::default().with_transaction_states(states)
}
