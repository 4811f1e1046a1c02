//! Topic decisions (the topic half of Kafka's `ReplicationControlManager`): the topic-name
//! rule, creating a topic, growing its partitions and deleting it.

use kafka_protocol::error::ResponseError;
use uuid::Uuid;

use super::election::{self, Candidates};
use super::placement::{
    check_partition_count, check_replica_capacity, place_replicas, replication_factor, validate_assignments,
};
use crate::metadata::image::{MetadataImage, TopicImage};
use crate::metadata::outcome::{ApiError, Outcome};
use crate::metadata::records::{ConfigResource, ElectionTrigger, LeaderElection, MetadataRecord, NewTopic};
use crate::metadata::METADATA_TOPIC;
use crate::topic_config;

/// Longest legal topic name, as in Kafka.
pub const MAX_TOPIC_NAME_LEN: usize = 249;

/// The group coordinator's topic (Kafka's `GROUP_METADATA_TOPIC_NAME`).
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";
/// The transaction coordinator's topic (Kafka's `TRANSACTION_STATE_TOPIC_NAME`).
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";

/// Kafka's `Topic.isInternal`: topics only the broker writes. Clients may read them (and
/// change their configs), but not write, delete or truncate them, nor create them (the broker
/// creates `__consumer_offsets` with its own settings on the first FindCoordinator).
pub fn is_internal_topic(name: &str) -> bool {
    name == OFFSETS_TOPIC || name == TRANSACTION_STATE_TOPIC
}

/// Whether a Metadata request may auto-create `name`: a legal name that is neither an internal
/// topic (created only with their own settings) nor the metadata log's `__cluster_metadata`.
pub fn may_auto_create(name: &str) -> bool {
    validate_topic_name(name).is_ok() && !is_internal_topic(name) && name != METADATA_TOPIC
}

/// Kafka's topic-name rule: 1..=249 chars of `[a-zA-Z0-9._-]`, and not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), ApiError> {
    let invalid = |why: &str| {
        Err(ApiError::new(
            ResponseError::InvalidTopicException,
            format!("topic name {name:?} is invalid: {why}"),
        ))
    };
    if name.is_empty() {
        return invalid("it is empty");
    }
    if name == "." || name == ".." {
        return invalid("'.' and '..' are reserved");
    }
    if name.len() > MAX_TOPIC_NAME_LEN {
        return invalid("it is longer than 249 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return invalid("only ASCII letters, digits, '.', '_' and '-' are allowed");
    }
    Ok(())
}

/// Validates a topic creation and returns the records that perform it.
pub fn create_topic(image: &MetadataImage, topic: &NewTopic, topic_id: Uuid) -> Result<Vec<MetadataRecord>, ApiError> {
    validate_topic_name(&topic.name)?;
    if image.topic(&topic.name).is_some() {
        return Err(ApiError::new(
            ResponseError::TopicAlreadyExists,
            format!("topic {:?} already exists", topic.name),
        ));
    }
    let invalid_config = |e: topic_config::TopicConfigError| ApiError::new(ResponseError::InvalidConfig, e.to_string());
    for (name, value) in &topic.configs {
        topic_config::validate(name, value).map_err(invalid_config)?;
    }
    topic_config::validate_together(&topic.configs, []).map_err(invalid_config)?;
    let assignments = match &topic.assignments {
        Some(a) => validate_assignments(image, a, None)?,
        None => {
            check_partition_count(topic.num_partitions)?;
            place_replicas(image, 0, topic.num_partitions, replication_factor(image, topic))?
        }
    };
    check_replica_capacity(image, &topic.name, &assignments)?;
    let mut records = vec![MetadataRecord::Topic {
        name: topic.name.clone(),
        topic_id,
    }];
    records.extend(partition_records(image, topic_id, 0, assignments)?);
    records.extend(topic.configs.iter().map(|(name, value)| MetadataRecord::Config {
        resource: ConfigResource::Topic(topic.name.clone()),
        name: name.clone(),
        value: Some(value.clone()),
    }));
    Ok(records)
}

/// Grows a topic to `count` partitions.
pub fn create_partitions(
    image: &MetadataImage,
    name: &str,
    count: i32,
    assignments: Option<&[Vec<i32>]>,
) -> Result<Vec<MetadataRecord>, ApiError> {
    let topic = existing_topic(image, name)?;
    let current = topic.partitions.len() as i32;
    if count <= current {
        return Err(ApiError::new(
            ResponseError::InvalidPartitions,
            format!("topic {name:?} has {current} partitions; the new count must be larger, not {count}"),
        ));
    }
    check_partition_count(count)?;
    let new_assignments = match assignments {
        Some(a) => {
            if a.len() as i32 != count - current {
                return Err(ApiError::new(
                    ResponseError::InvalidReplicaAssignment,
                    format!("{} assignments given for {} new partitions", a.len(), count - current),
                ));
            }
            validate_assignments(image, a, Some(topic.partitions[0].replicas.len()))?
        }
        None => {
            let rf = topic.partitions.first().map_or(1, |p| p.replicas.len()) as i16;
            place_replicas(image, current, count - current, rf)?
        }
    };
    check_replica_capacity(image, name, &new_assignments)?;
    partition_records(image, topic.topic_id, current, new_assignments)
}

/// Deletes the topic named by `name`, or by `topic_id` when the request gave no name; the
/// outcome carries both, since the request may have named only one.
pub fn delete_topic(
    image: &MetadataImage,
    name: Option<&str>,
    topic_id: &Uuid,
) -> Result<(Vec<MetadataRecord>, Outcome), ApiError> {
    let topic = match name {
        Some(n) => existing_topic(image, n)?,
        None => image
            .topic_by_id(topic_id)
            .ok_or_else(|| ApiError::new(ResponseError::UnknownTopicId, format!("no topic has id {topic_id}")))?,
    };
    let records = vec![MetadataRecord::RemoveTopic {
        topic_id: topic.topic_id,
    }];
    let outcome = Outcome::TopicDeleted {
        name: topic.name.clone(),
        topic_id: topic.topic_id,
    };
    Ok((records, outcome))
}

pub(super) fn existing_topic<'a>(image: &'a MetadataImage, name: &str) -> Result<&'a TopicImage, ApiError> {
    image.topic(name).ok_or_else(|| {
        ApiError::new(
            ResponseError::UnknownTopicOrPartition,
            format!("topic {name:?} does not exist"),
        )
    })
}

/// The new partitions' records, each led as [`election::elect_new`] decides: in sync on its
/// live replicas, led by the first that may lead. A partition with no live replica is refused
/// (Kafka: INVALID_REPLICA_ASSIGNMENT).
fn partition_records(
    image: &MetadataImage,
    topic_id: Uuid,
    first: i32,
    assignments: Vec<Vec<i32>>,
) -> Result<Vec<MetadataRecord>, ApiError> {
    let candidates = Candidates::new(image);
    assignments
        .into_iter()
        .enumerate()
        .map(|(i, replicas)| {
            let partition = first + i as i32;
            let elected = election::elect_new(&replicas, &candidates).ok_or_else(|| {
                ApiError::new(
                    ResponseError::InvalidReplicaAssignment,
                    format!(
                        "every broker of partition {partition}'s replicas {replicas:?} is fenced or shutting down; name live brokers"
                    ),
                )
            })?;
            Ok(MetadataRecord::Partition {
                topic_id,
                partition,
                leader: elected.leader,
                isr: elected.isr,
                replicas,
                leader_epoch: 0,
                partition_epoch: 0,
                election: Some(LeaderElection {
                    reason: elected.reason,
                    trigger: ElectionTrigger::Created,
                }),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::decide;
    use crate::controller::test_support::*;
    use crate::metadata::records::{MetadataCommand, MetadataRecord};

    #[test]
    fn topic_names_follow_kafka_rules() {
        assert!(validate_topic_name("orders.v1_2-x").is_ok());
        for bad in ["", ".", "..", "bad topic", "ümlaut", &"x".repeat(250)] {
            assert_eq!(
                validate_topic_name(bad).unwrap_err().error,
                ResponseError::InvalidTopicException
            );
        }
    }

    #[test]
    fn internal_topics_are_kafkas_and_are_never_auto_created() {
        assert!(is_internal_topic("__consumer_offsets") && is_internal_topic("__transaction_state"));
        assert!(!is_internal_topic("__cluster_metadata") && !is_internal_topic("__my_topic"));
        for name in [
            "__consumer_offsets",
            "__transaction_state",
            "__cluster_metadata",
            "bad name",
        ] {
            assert!(!may_auto_create(name), "{name}");
        }
        assert!(may_auto_create("__my_topic") && may_auto_create("orders"));
    }

    #[test]
    fn too_high_replication_factor_and_duplicates_are_refused() {
        let mut image = image_with_brokers(&[1]);
        let err = create_topic(&image, &new_topic("t", 1, 3), Uuid::from_u128(1)).unwrap_err();
        assert_eq!(err.error, ResponseError::InvalidReplicationFactor);
        let records = create_topic(&image, &new_topic("t", 1, 1), Uuid::from_u128(1)).unwrap();
        apply_all(&mut image, &records);
        let err = create_topic(&image, &new_topic("t", 1, 1), Uuid::from_u128(2)).unwrap_err();
        assert_eq!(err.error, ResponseError::TopicAlreadyExists);
        let err = create_topic(&image, &new_topic("u", 0, 1), Uuid::from_u128(3)).unwrap_err();
        assert_eq!(err.error, ResponseError::InvalidPartitions);
    }

    #[test]
    fn invalid_configs_are_refused_at_creation() {
        let image = image_with_brokers(&[1]);
        let mut topic = new_topic("t", 1, 1);
        topic.configs.insert("retention.ms".into(), "forever".into());
        assert_eq!(
            create_topic(&image, &topic, Uuid::from_u128(1)).unwrap_err().error,
            ResponseError::InvalidConfig
        );
    }

    #[test]
    fn partitions_only_grow() {
        let mut image = image_with_brokers(&[1]);
        let records = create_topic(&image, &new_topic("t", 3, 1), Uuid::from_u128(1)).unwrap();
        apply_all(&mut image, &records);
        assert_eq!(
            create_partitions(&image, "t", 3, None).unwrap_err().error,
            ResponseError::InvalidPartitions
        );
        let records = create_partitions(&image, "t", 6, None).unwrap();
        apply_all(&mut image, &records);
        assert_eq!(image.topic("t").unwrap().partitions.len(), 6);
        assert_eq!(
            create_partitions(&image, "nope", 6, None).unwrap_err().error,
            ResponseError::UnknownTopicOrPartition
        );
    }

    /// Brokers 1..=3, broker 2 registered with room for `capacity` replicas, the others without
    /// a capacity (registrations from before brokers reported one).
    fn image_with_capacity_on_broker_2(capacity: u32) -> MetadataImage {
        let mut image = image_with_brokers(&[1, 3]);
        image.apply(&MetadataRecord::RegisterBroker {
            broker_id: 2,
            incarnation_id: Uuid::nil(),
            endpoints: vec![],
            rack: None,
            replica_capacity: Some(capacity),
        });
        image
    }

    #[test]
    fn a_topic_that_would_pass_a_brokers_replica_capacity_is_refused_with_policy_violation() {
        let mut image = image_with_capacity_on_broker_2(10);
        // RF 3 on 3 brokers: every partition has a replica on broker 2.
        let records = create_topic(&image, &new_topic("first", 6, 3), Uuid::from_u128(1)).unwrap();
        apply_all(&mut image, &records);
        let err = create_topic(&image, &new_topic("second", 5, 3), Uuid::from_u128(2)).unwrap_err();
        assert_eq!(err.error, ResponseError::PolicyViolation);
        for part in [
            "broker 2",
            "11 partition replicas",
            "6 hosted + 5 new",
            "capacity of 10",
            "ulimit -n",
            "add brokers",
        ] {
            assert!(err.message.contains(part), "{part:?} missing from: {}", err.message);
        }
        // Exactly filling the capacity is allowed; the decision is the same through `decide`.
        let command = MetadataCommand::CreateTopic {
            topic: new_topic("second", 4, 3),
            topic_id: Uuid::from_u128(2),
        };
        decide_and_apply(&mut image, command);
        let command = MetadataCommand::CreateTopic {
            topic: new_topic("third", 1, 3),
            topic_id: Uuid::from_u128(3),
        };
        assert_eq!(
            decide(&image, &command).unwrap_err().error,
            ResponseError::PolicyViolation
        );
        // A placement avoiding broker 2 is not limited by it (1 and 3 registered no capacity).
        let mut elsewhere = new_topic("elsewhere", 1, 2);
        elsewhere.assignments = Some(vec![vec![1, 3]]);
        assert!(create_topic(&image, &elsewhere, Uuid::from_u128(4)).is_ok());
    }

    #[test]
    fn partitions_that_would_pass_a_brokers_replica_capacity_are_refused() {
        let mut image = image_with_capacity_on_broker_2(4);
        let records = create_topic(&image, &new_topic("t", 3, 3), Uuid::from_u128(1)).unwrap();
        apply_all(&mut image, &records);
        let err = create_partitions(&image, "t", 5, None).unwrap_err();
        assert_eq!(err.error, ResponseError::PolicyViolation);
        assert!(
            err.message.contains("5 partition replicas on broker 2"),
            "{}",
            err.message
        );
        assert!(err.message.contains("capacity of 4"), "{}", err.message);
        let records = create_partitions(&image, "t", 4, None).unwrap();
        apply_all(&mut image, &records);
        assert_eq!(image.topic("t").unwrap().partitions.len(), 4);
        // A named assignment is checked too.
        let named = [vec![2, 1, 3]];
        let err = create_partitions(&image, "t", 5, Some(&named)).unwrap_err();
        assert_eq!(err.error, ResponseError::PolicyViolation);
    }

    #[test]
    fn racing_creations_of_one_topic_decide_in_log_order() {
        let mut image = image_with_brokers(&[1]);
        let first = MetadataCommand::CreateTopic {
            topic: new_topic("t", 1, 1),
            topic_id: Uuid::from_u128(1),
        };
        let second = MetadataCommand::CreateTopic {
            topic: new_topic("t", 2, 1),
            topic_id: Uuid::from_u128(2),
        };
        let (records, _) = decide(&image, &first).unwrap();
        apply_all(&mut image, &records);
        assert_eq!(
            decide(&image, &second).unwrap_err().error,
            ResponseError::TopicAlreadyExists
        );
        assert_eq!(image.topic("t").unwrap().topic_id, Uuid::from_u128(1));
    }
}
