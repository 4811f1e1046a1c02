//! FindCoordinator: the broker coordinating a consumer group is the leader of the group's
//! `__consumer_offsets` partition. The topic is created on first use (Kafka does the same),
//! with `offsets.topic.num.partitions` partitions and `offsets.topic.replication.factor`
//! replicas (fewer while fewer brokers are live), compacted.
//!
//! A transactional id's coordinator is the leader of its `__transaction_state` partition,
//! the topic created on first use the same way (`TransactionManager::new_topic`: compacted,
//! `min.insync.replicas` from `transaction.state.log.min.isr`).
//!
//! A group key needs DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED), a transaction
//! key DESCRIBE on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED), per key
//! from v4 and for the whole answer before, as Kafka. `__consumer_offsets` is created only for
//! a key the principal may look up.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::{commit_error, str_bytes, Access, RequestContext};
use crate::broker::Broker;
use crate::controller::{OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC};
use crate::metadata::acls::{AclOperation, ResourceType};
use crate::metadata::image::MetadataImage;
use crate::metadata::records::MetadataCommand;
use crate::metadata::records::NewTopic;
use crate::topic_config;

/// v4 batches keys into `coordinator_keys` and answers per key.
const FIRST_BATCHED_VERSION: i16 = 4;
const GROUP_KEY: i8 = 0;
const TRANSACTION_KEY: i8 = 1;
/// A share-partition's key (KIP-932's share coordinator, `group:topicId:partition`): Sluice keeps
/// share-partition state on the partition leaders and has no share coordinator, so the lookup,
/// which only Kafka's brokers make, is answered at once with a non-retriable INVALID_REQUEST.
/// Share group members find their group coordinator with the group key, as Kafka's.
const SHARE_KEY: i8 = 2;

/// Where a key's coordinator is, or why there is none.
struct Found {
    node_id: i32,
    host: String,
    port: i32,
    error: Option<(ResponseError, String)>,
}

/// The coordinator is named by its endpoint on the client's listener.
pub async fn handle(ctx: RequestContext, request: FindCoordinatorRequest) -> FindCoordinatorResponse {
    let version = ctx.version;
    let RequestContext { broker, session, .. } = ctx;
    let keys: Vec<StrBytes> = if version < FIRST_BATCHED_VERSION {
        vec![request.key.clone()]
    } else {
        request.coordinator_keys.clone()
    };
    let refusals: Vec<Option<Found>> = {
        let image = broker.metadata.image();
        let access = session.access(&broker.security.authorizer, &image.acls);
        keys.iter().map(|key| refusal(access, request.key_type, key)).collect()
    };
    let wanted = refusals.iter().any(Option::is_none);
    let image = if request.key_type == GROUP_KEY && wanted {
        ensure_offsets_topic(&broker).await
    } else if request.key_type == TRANSACTION_KEY && wanted {
        ensure_transaction_topic(&broker).await
    } else {
        Ok(broker.metadata.image())
    };
    let listener = &session.listener;
    let found: Vec<Found> = keys
        .iter()
        .zip(refusals)
        .map(|(key, refusal)| match (&image, request.key_type, refusal) {
            (_, _, Some(refused)) => refused,
            (_, SHARE_KEY, None) => not_found(
                ResponseError::InvalidRequest,
                "Sluice has no share coordinator (KIP-932, FindCoordinator key type 2): share-partition state is kept by the partition leaders; share group members look up their group coordinator with key type 0".into(),
            ),
            (_, k, None) if k != GROUP_KEY && k != TRANSACTION_KEY => {
                not_found(ResponseError::InvalidRequest, format!("unknown key type {k}"))
            }
            (Err(e), _, None) => not_found(e.0, e.1.clone()),
            (Ok(image), TRANSACTION_KEY, None) => {
                if key.is_empty() {
                    not_found(ResponseError::InvalidRequest, "the transactional id is empty".into())
                } else {
                    coordinator_of(image, TRANSACTION_STATE_TOPIC, broker.txn.partition_for(key), listener)
                }
            }
            (Ok(image), _, None) => group_coordinator(&broker, image, key, listener),
        })
        .collect();
    if version < FIRST_BATCHED_VERSION {
        let f = found
            .into_iter()
            .next()
            .unwrap_or_else(|| not_found(ResponseError::InvalidRequest, "no key".into()));
        return FindCoordinatorResponse::default()
            .with_error_code(f.error.as_ref().map_or(0, |e| e.0.code()))
            .with_error_message(f.error.map(|e| str_bytes(e.1)))
            .with_node_id(BrokerId(f.node_id))
            .with_host(str_bytes(f.host))
            .with_port(f.port);
    }
    let coordinators = keys
        .into_iter()
        .zip(found)
        .map(|(key, f)| {
            Coordinator::default()
                .with_key(key)
                .with_node_id(BrokerId(f.node_id))
                .with_host(str_bytes(f.host))
                .with_port(f.port)
                .with_error_code(f.error.as_ref().map_or(0, |e| e.0.code()))
                .with_error_message(f.error.map(|e| str_bytes(e.1)))
        })
        .collect();
    FindCoordinatorResponse::default().with_coordinators(coordinators)
}

/// The answer for a key the principal may not look up, if it may not.
fn refusal(access: Access<'_>, key_type: i8, key: &str) -> Option<Found> {
    let (resource_type, error) = match key_type {
        GROUP_KEY => (ResourceType::Group, ResponseError::GroupAuthorizationFailed),
        TRANSACTION_KEY => (
            ResourceType::TransactionalId,
            ResponseError::TransactionalIdAuthorizationFailed,
        ),
        _ => return None,
    };
    let allowed = access.authorize(AclOperation::Describe, resource_type, key);
    (!allowed).then(|| not_found(error, access.denied(AclOperation::Describe, resource_type, key)))
}

fn not_found(error: ResponseError, message: String) -> Found {
    Found {
        node_id: -1,
        host: String::new(),
        port: -1,
        error: Some((error, message)),
    }
}

fn group_coordinator(broker: &Broker, image: &MetadataImage, group_id: &str, listener: &str) -> Found {
    if group_id.is_empty() {
        return not_found(ResponseError::InvalidRequest, "the group id is empty".into());
    }
    coordinator_of(image, OFFSETS_TOPIC, broker.groups.partition_for(group_id), listener)
}

/// The leader of `topic`'s `partition`, named by its endpoint on `listener`.
fn coordinator_of(image: &MetadataImage, topic: &str, partition: i32, listener: &str) -> Found {
    let leader = image
        .topic(topic)
        .and_then(|t| t.partitions.get(partition as usize))
        .map_or(-1, |p| p.leader);
    match image.brokers.get(&leader).filter(|b| b.is_live()) {
        Some(b) => match b.endpoint(listener) {
            Some(endpoint) => Found {
                node_id: leader,
                host: endpoint.host.clone(),
                port: endpoint.port,
                error: None,
            },
            None => not_found(
                ResponseError::CoordinatorNotAvailable,
                format!("the coordinator, broker {leader}, has no listener named {listener}; give every broker the same listener names"),
            ),
        },
        None => not_found(
            ResponseError::CoordinatorNotAvailable,
            format!("partition {partition} of {topic} has no live leader yet; retry shortly"),
        ),
    }
}

/// The image once `__consumer_offsets` exists, creating it if needed.
async fn ensure_offsets_topic(broker: &Broker) -> Result<Arc<MetadataImage>, (ResponseError, String)> {
    if broker.metadata.image().topic(OFFSETS_TOPIC).is_some() {
        return Ok(broker.metadata.image());
    }
    let config = &broker.config;
    let topic = NewTopic {
        name: OFFSETS_TOPIC.to_string(),
        num_partitions: config.group.num_partitions,
        replication_factor: config.offsets_topic_replication_factor,
        replication_factor_defaulted: true,
        assignments: None,
        configs: BTreeMap::from([
            ("cleanup.policy".to_string(), "compact".to_string()),
            ("compression.type".to_string(), "producer".to_string()),
            topic_config::segment_bytes_entry(config.offsets_topic_segment_bytes.into()),
        ]),
    };
    ensure_topic(broker, topic).await
}

/// The image once `__transaction_state` exists, creating it if needed.
async fn ensure_transaction_topic(broker: &Broker) -> Result<Arc<MetadataImage>, (ResponseError, String)> {
    if broker.metadata.image().topic(TRANSACTION_STATE_TOPIC).is_some() {
        return Ok(broker.metadata.image());
    }
    let live = broker.metadata.image().brokers.values().filter(|b| b.is_live()).count();
    ensure_topic(broker, broker.txn.new_topic(live)).await
}

/// Creates an internal topic (a concurrent creation counts as success).
async fn ensure_topic(broker: &Broker, topic: NewTopic) -> Result<Arc<MetadataImage>, (ResponseError, String)> {
    let name = topic.name.clone();
    let partitions = topic.num_partitions;
    let command = MetadataCommand::CreateTopic {
        topic,
        topic_id: Uuid::new_v4(),
    };
    match broker.commit(command).await {
        Ok((image, _)) => {
            tracing::info!(partitions, "created {name}");
            Ok(image)
        }
        Err(e) => {
            let image = broker.metadata.image();
            if image.topic(&name).is_some() {
                return Ok(image); // created concurrently
            }
            let (_, message) = commit_error(&e);
            Err((ResponseError::CoordinatorNotAvailable, message))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::testing::Acls;

    fn refused_with(access: Access<'_>, key_type: i8, key: &str) -> Option<ResponseError> {
        refusal(access, key_type, key).and_then(|f| f.error.map(|e| e.0))
    }

    #[test]
    fn a_group_key_needs_describe_on_the_group() {
        let acls = Acls::none().allow(ResourceType::Group, "g", AclOperation::Describe);
        assert_eq!(refused_with(acls.access(), GROUP_KEY, "g"), None);
        assert_eq!(
            refused_with(acls.access(), GROUP_KEY, "h"),
            Some(ResponseError::GroupAuthorizationFailed)
        );
    }

    #[test]
    fn a_transaction_key_needs_describe_on_the_transactional_id() {
        let acls = Acls::none()
            .allow(ResourceType::TransactionalId, "tx", AclOperation::Write)
            .allow(ResourceType::Group, "other", AclOperation::Describe);
        assert_eq!(
            refused_with(acls.access(), TRANSACTION_KEY, "tx"),
            None,
            "WRITE implies DESCRIBE"
        );
        assert_eq!(
            refused_with(acls.access(), TRANSACTION_KEY, "other"),
            Some(ResponseError::TransactionalIdAuthorizationFailed)
        );
    }
}
