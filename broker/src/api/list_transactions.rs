//! ListTransactions: the transactions this broker coordinates, filtered by state, producer id,
//! how long they have run (v1) and a transactional-id pattern (v2, a regular expression as
//! Java's `Pattern` reads it for the patterns tools use). Unknown state names are echoed in
//! `unknown_state_filters`; while a `__transaction_state` partition is still loading the
//! answer is COORDINATOR_LOAD_IN_PROGRESS, as Kafka.
//!
//! Ids the principal may not DESCRIBE are left out silently.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::list_transactions_response::TransactionState;
use kafka_protocol::messages::{ListTransactionsRequest, ListTransactionsResponse, ProducerId, TransactionalId};

use super::{str_bytes, RequestContext};
use crate::metadata::acls::{AclOperation, ResourceType};
use crate::txn::coordinator::ListFilter;
use crate::txn::records::TxnState;

/// A pattern longer than this is refused (INVALID_REQUEST): it is compiled per request.
const MAX_PATTERN_LEN: usize = 1024;

pub fn handle(ctx: &RequestContext, request: ListTransactionsRequest) -> ListTransactionsResponse {
    let RequestContext { broker, session, .. } = ctx;
    let mut unknown = Vec::new();
    let mut states = Vec::new();
    for name in &request.state_filters {
        match TxnState::from_name(name.as_str()) {
            Some(state) => states.push(state),
            None => unknown.push(name.clone()),
        }
    }
    let pattern = match request.transactional_id_pattern.as_deref().filter(|p| !p.is_empty()) {
        None => None,
        Some(p) if p.len() > MAX_PATTERN_LEN => {
            return ListTransactionsResponse::default().with_error_code(ResponseError::InvalidRequest.code())
        }
        Some(p) => match regex::Regex::new(&format!("^(?:{p})$")) {
            Ok(re) => Some(re),
            Err(_) => return ListTransactionsResponse::default().with_error_code(ResponseError::InvalidRequest.code()),
        },
    };
    if !request.state_filters.is_empty() && states.is_empty() {
        // Every state named is unknown: nothing can match (Kafka answers an empty list).
        return ListTransactionsResponse::default().with_unknown_state_filters(unknown);
    }
    let filter = ListFilter {
        states,
        producer_ids: request.producer_id_filters.iter().map(|p| p.0).collect(),
        min_duration_ms: request.duration_filter,
    };
    let (views, loading) = broker.txn.list(&filter);
    let image = broker.metadata.image();
    let access = session.access(&broker.security.authorizer, &image.acls);
    let transactions = views
        .into_iter()
        .filter(|v| pattern.as_ref().is_none_or(|re| re.is_match(&v.transactional_id)))
        .filter(|v| {
            access.check(
                AclOperation::Describe,
                ResourceType::TransactionalId,
                &v.transactional_id,
            )
        })
        .map(|v| {
            TransactionState::default()
                .with_transactional_id(TransactionalId(str_bytes(v.transactional_id)))
                .with_producer_id(ProducerId(v.producer_id))
                .with_transaction_state(str_bytes(v.state.name()))
        })
        .collect();
    ListTransactionsResponse::default()
        .with_error_code(if loading {
            ResponseError::CoordinatorLoadInProgress.code()
        } else {
            0
        })
        .with_unknown_state_filters(unknown)
        .with_transaction_states(transactions)
}
