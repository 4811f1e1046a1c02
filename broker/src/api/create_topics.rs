//! CreateTopics: one result per requested topic, with its effective configs (v5+).
//!
//! Authorized as Kafka's controller does: a topic needs CREATE on the cluster or on itself
//! (else TOPIC_AUTHORIZATION_FAILED), and its configs are answered only with DESCRIBE_CONFIGS
//! on it (else `topic_config_error_code` is TOPIC_AUTHORIZATION_FAILED and they are left out).

use std::collections::{BTreeMap, HashMap};

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::create_topics_response::{CreatableTopicConfigs, CreatableTopicResult};
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};
use uuid::Uuid;

use super::{commit_error, str_bytes, Access, RequestContext};
use crate::broker::Broker;
use crate::controller::{self, ApiError};
use crate::metadata::acls::{AclOperation, ResourceType};
use crate::metadata::records::MetadataCommand;
use crate::metadata::records::NewTopic;
use crate::metadata::METADATA_TOPIC;
use crate::topic_config;

pub async fn handle(ctx: RequestContext, request: CreateTopicsRequest) -> CreateTopicsResponse {
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    let access = session.access(&broker.security.authorizer, &image.acls);
    let mut seen: HashMap<String, usize> = HashMap::new();
    for topic in &request.topics {
        *seen.entry(topic.name.0.to_string()).or_default() += 1;
    }
    let mut topics = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let name = topic.name.0.to_string();
        let result = CreatableTopicResult::default().with_name(topic.name.clone());
        if seen[&name] > 1 {
            let message = format!("topic {name:?} appears more than once in the request");
            topics.push(failed(result, ResponseError::InvalidRequest.code(), message));
            continue;
        }
        topics.push(create_one(&broker, access, topic, result, request.validate_only).await);
    }
    CreateTopicsResponse::default().with_topics(topics)
}

/// Whether the principal may create topic `name`: `Ok` with whether it may see the topic's
/// configs, or why not.
fn creation_rights(access: Access<'_>, name: &str) -> Result<bool, String> {
    let may_create =
        access.check_cluster(AclOperation::Create) || access.authorize(AclOperation::Create, ResourceType::Topic, name);
    if !may_create {
        return Err(access.denied(AclOperation::Create, ResourceType::Topic, name));
    }
    Ok(access.check(AclOperation::DescribeConfigs, ResourceType::Topic, name))
}

async fn create_one(
    broker: &Broker,
    access: Access<'_>,
    topic: &CreatableTopic,
    result: CreatableTopicResult,
    validate_only: bool,
) -> CreatableTopicResult {
    if let Some(message) = prohibited(broker, topic.name.0.as_str()) {
        return failed(result, ResponseError::InvalidRequest.code(), message);
    }
    let configs_shown = match creation_rights(access, topic.name.0.as_str()) {
        Ok(configs_shown) => configs_shown,
        Err(message) => return failed(result, ResponseError::TopicAuthorizationFailed.code(), message),
    };
    let new_topic = match new_topic(broker, topic) {
        Ok(t) => t,
        Err(e) => return failed(result, e.code(), e.message),
    };
    let topic_id = Uuid::new_v4();
    if validate_only {
        let image = broker.metadata.image();
        return match controller::create_topic(&image, &new_topic, topic_id) {
            Ok(_) => {
                let replication_factor = controller::replication_factor(&image, &new_topic);
                succeeded(
                    broker,
                    result,
                    &new_topic,
                    replication_factor,
                    Uuid::nil(),
                    configs_shown,
                )
            }
            Err(e) => failed(result, e.code(), e.message),
        };
    }
    let placed = controller::propose_placement(&broker.metadata.image(), new_topic.clone());
    match broker
        .commit(MetadataCommand::CreateTopic {
            topic: placed,
            topic_id,
        })
        .await
    {
        Ok((image, _)) => {
            let replication_factor = image
                .topic_by_id(&topic_id)
                .and_then(|t| t.partitions.first())
                .map_or(new_topic.replication_factor, |p| p.replicas.len() as i16);
            tracing::info!(
                topic = %new_topic.name,
                partitions = new_topic.num_partitions,
                replication_factor,
                "created topic"
            );
            succeeded(broker, result, &new_topic, replication_factor, topic_id, configs_shown)
        }
        Err(e) => {
            let (code, message) = commit_error(&e);
            failed(result, code, message)
        }
    }
}

/// Why a client may not create `name`, if it may not. Kafka's controller refuses
/// `__cluster_metadata` (its metadata log; here a partition of that name would share the quorum's
/// `__cluster_metadata-0` directory) with INVALID_REQUEST. Sluice refuses the internal topics the
/// same way while they do not exist: the broker creates `__consumer_offsets` with its own
/// partition count and settings, which a client-made one would not have (once it exists, the
/// answer is TOPIC_ALREADY_EXISTS, as Kafka's).
fn prohibited(broker: &Broker, name: &str) -> Option<String> {
    let absent_internal = controller::is_internal_topic(name) && broker.metadata.image().topic(name).is_none();
    (name == METADATA_TOPIC || absent_internal).then(|| format!("Creation of internal topic {name} is prohibited."))
}

/// Fills in the defaults Kafka applies (-1 partitions or replication factor = broker default;
/// the controller lowers a default replication factor to the live broker count).
fn new_topic(broker: &Broker, topic: &CreatableTopic) -> Result<NewTopic, ApiError> {
    let mut configs = BTreeMap::new();
    for config in &topic.configs {
        let value = config.value.as_ref().ok_or_else(|| {
            ApiError::new(
                ResponseError::InvalidConfig,
                format!("config {} has a null value", config.name.as_str()),
            )
        })?;
        configs.insert(config.name.to_string(), value.to_string());
    }
    let assignments = if topic.assignments.is_empty() {
        None
    } else {
        if topic.num_partitions != -1 || topic.replication_factor != -1 {
            return Err(ApiError::new(
                ResponseError::InvalidRequest,
                "give either a replica assignment or numPartitions/replicationFactor, not both",
            ));
        }
        let mut sorted: Vec<_> = topic.assignments.iter().collect();
        sorted.sort_by_key(|a| a.partition_index);
        if sorted.iter().enumerate().any(|(i, a)| a.partition_index != i as i32) {
            return Err(ApiError::new(
                ResponseError::InvalidReplicaAssignment,
                "partition indexes must be 0..n without gaps",
            ));
        }
        Some(
            sorted
                .iter()
                .map(|a| a.broker_ids.iter().map(|b| b.0).collect())
                .collect::<Vec<Vec<i32>>>(),
        )
    };
    Ok(NewTopic {
        name: topic.name.0.to_string(),
        num_partitions: match (topic.num_partitions, &assignments) {
            (_, Some(a)) => a.len() as i32,
            (-1, None) => broker.config.num_partitions,
            (n, None) => n,
        },
        replication_factor: match (topic.replication_factor, &assignments) {
            (_, Some(a)) => a.first().map_or(1, Vec::len) as i16,
            (-1, None) => broker.config.default_replication_factor,
            (n, None) => n,
        },
        replication_factor_defaulted: topic.replication_factor == -1 && assignments.is_none(),
        assignments,
        configs,
    })
}

/// A created (or validated) topic's result; without DESCRIBE_CONFIGS on it, only its id,
/// as Kafka's controller answers.
fn succeeded(
    broker: &Broker,
    result: CreatableTopicResult,
    topic: &NewTopic,
    replication_factor: i16,
    topic_id: Uuid,
    configs_shown: bool,
) -> CreatableTopicResult {
    if !configs_shown {
        return configs_hidden(result.with_topic_id(topic_id));
    }
    let configs = topic_config::describe(&topic.configs, &broker.topic_defaults(&broker.metadata.image()))
        .into_iter()
        .map(|(def, value, source)| {
            CreatableTopicConfigs::default()
                .with_name(str_bytes(def.name))
                .with_value(Some(str_bytes(value)))
                .with_config_source(source as i8)
        })
        .collect();
    result
        .with_topic_id(topic_id)
        .with_num_partitions(topic.num_partitions)
        .with_replication_factor(replication_factor)
        .with_configs(Some(configs))
}

fn configs_hidden(result: CreatableTopicResult) -> CreatableTopicResult {
    result
        .with_topic_config_error_code(ResponseError::TopicAuthorizationFailed.code())
        .with_num_partitions(-1)
        .with_replication_factor(-1)
        .with_configs(Some(Vec::new()))
}

fn failed(result: CreatableTopicResult, code: i16, message: String) -> CreatableTopicResult {
    result
        .with_error_code(code)
        .with_error_message(Some(str_bytes(message)))
        .with_num_partitions(-1)
        .with_replication_factor(-1)
        .with_configs(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::testing::Acls;

    #[test]
    fn creating_a_topic_needs_create_on_the_cluster_or_the_topic() {
        assert!(creation_rights(Acls::none().access(), "orders").is_err());
        let writers = Acls::none().allow(ResourceType::Topic, "orders", AclOperation::Write);
        assert!(
            creation_rights(writers.access(), "orders").is_err(),
            "WRITE is not CREATE"
        );
        let creators = Acls::none().allow(ResourceType::Topic, "orders", AclOperation::Create);
        assert_eq!(
            creation_rights(creators.access(), "orders"),
            Ok(false),
            "no DESCRIBE_CONFIGS"
        );
        assert!(creation_rights(creators.access(), "payments").is_err());
        let cluster = Acls::none().allow_cluster(AclOperation::Create).allow(
            ResourceType::Topic,
            "payments",
            AclOperation::DescribeConfigs,
        );
        assert_eq!(creation_rights(cluster.access(), "payments"), Ok(true));
        assert_eq!(creation_rights(Acls::disabled().access(), "payments"), Ok(true));
    }

    #[test]
    fn hidden_configs_say_why() {
        let result = configs_hidden(CreatableTopicResult::default().with_topic_id(Uuid::from_u128(7)));
        assert_eq!(
            result.topic_config_error_code,
            ResponseError::TopicAuthorizationFailed.code()
        );
        assert_eq!((result.error_code, result.topic_id), (0, Uuid::from_u128(7)));
        assert_eq!(result.configs, Some(Vec::new()));
    }
}
