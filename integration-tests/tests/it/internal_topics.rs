//! Internal topics belong to the broker. Clients read `__consumer_offsets` (Kafka's offsets
//! formatter does) and may change its configs, but cannot create, delete, write or truncate
//! `__consumer_offsets` or `__transaction_state`, nor create `__cluster_metadata`, with the
//! error codes Kafka's KRaft broker and controller answer where Kafka refuses: CreateTopics of
//! `__cluster_metadata` INVALID_REQUEST (ControllerApis), Produce and DeleteRecords
//! INVALID_TOPIC_EXCEPTION (ReplicaManager). Kafka's controller deletes an internal topic and
//! creates a missing one when asked (only its `kafka-topics` tool refuses); Sluice refuses those
//! with the same codes. The group coordinator's own appends keep working.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    CreateTopicsRequest, DeleteTopicsRequest, IncrementalAlterConfigsRequest, MetadataRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use rdkafka::admin::{NewTopic, TopicReplication};
use rdkafka::error::KafkaError;
use rdkafka::producer::FutureRecord;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use sluice_integration_tests::groups::{commit_as_admin, committed_offsets, find_coordinator, offsets_partition};
use sluice_integration_tests::{clients, kafka_client, NodeOptions, SluiceNode};

const TIMEOUT: Duration = Duration::from_secs(20);
const OFFSETS: &str = "__consumer_offsets";
const TRANSACTIONS: &str = "__transaction_state";
const METADATA_LOG: &str = "__cluster_metadata";
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const INVALID_TOPIC_EXCEPTION: i16 = 17;
const TOPIC_ALREADY_EXISTS: i16 = 36;
const INVALID_REQUEST: i16 = 42;

fn name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_string()))
}

/// Metadata v12 for `topics`, allowing auto-creation; each topic's error code.
fn metadata_auto_creating(addr: SocketAddr, topics: &[&str]) -> Result<BTreeMap<String, i16>> {
    let request = MetadataRequest::default()
        .with_allow_auto_topic_creation(true)
        .with_topics(Some(
            topics
                .iter()
                .map(|t| MetadataRequestTopic::default().with_name(Some(name(t))))
                .collect(),
        ));
    let response = kafka_client::call(addr, &request, 12, TIMEOUT)?;
    Ok(response
        .topics
        .iter()
        .map(|t| {
            (
                t.name.as_ref().map_or_else(String::new, |n| n.0.to_string()),
                t.error_code,
            )
        })
        .collect())
}

/// CreateTopics v7 for one topic: its error code and message.
fn create(addr: SocketAddr, topic: &str) -> Result<(i16, Option<String>)> {
    let request = CreateTopicsRequest::default()
        .with_topics(vec![CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(1)
            .with_replication_factor(1)])
        .with_timeout_ms(30_000);
    let response = kafka_client::call(addr, &request, 7, TIMEOUT)?;
    let result = response.topics.first().context("no topic result")?;
    Ok((result.error_code, result.error_message.as_ref().map(|m| m.to_string())))
}

/// A group whose offsets live in partition 0 of `__consumer_offsets`, the one a Fetch reads here.
fn group_on_partition_0() -> String {
    (0..)
        .map(|i| format!("internal-{i}"))
        .find(|g| offsets_partition(g) == 0)
        .expect("some group hashes to partition 0")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_cannot_create_delete_write_or_truncate_internal_topics_but_the_coordinator_writes_them() -> Result<()>
{
    let mut node = SluiceNode::start(NodeOptions::default())?;
    let addr = node.addr();
    let admin = clients::admin_client(&node.bootstrap())?;

    // Before any group: Metadata does not auto-create them, CreateTopics refuses them.
    let reserved = [OFFSETS, TRANSACTIONS, METADATA_LOG];
    let answers = metadata_auto_creating(addr, &reserved)?;
    ensure!(
        reserved
            .iter()
            .all(|t| answers.get(*t) == Some(&UNKNOWN_TOPIC_OR_PARTITION)),
        "auto-creating Metadata for the internal topics: {answers:?}"
    );
    let new_topics: Vec<NewTopic> = reserved
        .iter()
        .map(|t| NewTopic::new(t, 1, TopicReplication::Fixed(1)))
        .collect();
    let results = admin.create_topics(&new_topics, &clients::admin_options()).await?;
    ensure!(
        results.len() == 3
            && results
                .iter()
                .all(|r| matches!(r, Err((_, RDKafkaErrorCode::InvalidRequest)))),
        "rdkafka CreateTopics of the internal topics: {results:?}"
    );
    let expected = Some(format!("Creation of internal topic {METADATA_LOG} is prohibited."));
    ensure!(
        create(addr, METADATA_LOG)? == (INVALID_REQUEST, expected.clone()),
        "CreateTopics {METADATA_LOG}: {:?}, Kafka answers {expected:?}",
        create(addr, METADATA_LOG)?
    );
    let listed = kafka_client::metadata(addr)?;
    ensure!(
        listed.topics.is_empty(),
        "topics exist after refused creations: {:?}",
        listed.topics.iter().map(|t| t.name.clone()).collect::<Vec<_>>()
    );

    // FindCoordinator creates __consumer_offsets; the coordinator appends a commit to it.
    let group = group_on_partition_0();
    let deadline = Instant::now() + TIMEOUT;
    while find_coordinator(addr, &group)?.is_err() {
        ensure!(Instant::now() < deadline, "no coordinator for {group}");
        std::thread::sleep(Duration::from_millis(100));
    }
    clients::create_topic(&admin, "orders", 1, &[]).await?;
    let commit = BTreeMap::from([(0, 42)]);
    let deadline = Instant::now() + TIMEOUT;
    while let Err(e) = commit_as_admin(&node.bootstrap(), &group, "orders", &commit) {
        ensure!(Instant::now() < deadline, "the coordinator never took a commit: {e:#}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Reading __consumer_offsets stays allowed: the commit is there.
    let stored = kafka_client::consumer_fetch(addr, OFFSETS, 0, 1 << 20, 1 << 20)?;
    ensure!(
        !stored.is_empty(),
        "partition 0 of {OFFSETS} holds no record after a commit of {group}"
    );

    // Now it exists: creating it again is TOPIC_ALREADY_EXISTS, as in Kafka.
    ensure!(
        create(addr, OFFSETS)?.0 == TOPIC_ALREADY_EXISTS,
        "{:?}",
        create(addr, OFFSETS)?
    );

    // Deleting it, by name (rdkafka) or by id (DeleteTopics v6), is refused.
    let deleted = admin.delete_topics(&[OFFSETS], &clients::admin_options()).await?;
    ensure!(
        matches!(deleted.as_slice(), [Err((n, RDKafkaErrorCode::InvalidTopic))] if n == OFFSETS),
        "rdkafka DeleteTopics {OFFSETS}: {deleted:?}"
    );
    let topic_id = kafka_client::topic_id(addr, OFFSETS)?;
    let by_id = DeleteTopicsRequest::default()
        .with_topics(vec![DeleteTopicState::default().with_topic_id(topic_id)])
        .with_timeout_ms(10_000);
    let response = kafka_client::call(addr, &by_id, 6, TIMEOUT)?;
    let code = response.responses.first().context("no DeleteTopics result")?.error_code;
    ensure!(
        code == INVALID_TOPIC_EXCEPTION,
        "DeleteTopics v6 of {OFFSETS} by id: error {code}"
    );

    // Client writes are refused (rdkafka and a raw Produce); the metadata log is no topic.
    let producer = clients::future_producer(&node.bootstrap())?;
    let sent = producer
        .send(
            FutureRecord::to(OFFSETS).partition(0).key("k").payload("forged commit"),
            TIMEOUT,
        )
        .await;
    ensure!(
        matches!(
            sent,
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::InvalidTopic), _))
        ),
        "rdkafka produce to {OFFSETS}: {sent:?}"
    );
    ensure!(
        kafka_client::produce_one_record(addr, OFFSETS, -1)? == INVALID_TOPIC_EXCEPTION,
        "raw produce to {OFFSETS}"
    );
    ensure!(
        kafka_client::produce_one_record(addr, METADATA_LOG, -1)? == UNKNOWN_TOPIC_OR_PARTITION,
        "raw produce to {METADATA_LOG}"
    );

    // DeleteRecords is refused; IncrementalAlterConfigs is allowed, as in Kafka.
    let mut truncate = TopicPartitionList::new();
    truncate.add_partition_offset(OFFSETS, 0, Offset::End)?;
    let truncated = admin.delete_records(&truncate, &clients::admin_options()).await?;
    let error = truncated
        .elements()
        .first()
        .map(|e| e.error())
        .context("no DeleteRecords result")?;
    ensure!(
        matches!(error, Err(KafkaError::OffsetFetch(RDKafkaErrorCode::InvalidTopic))),
        "rdkafka DeleteRecords on {OFFSETS}: {error:?}"
    );
    ensure!(
        alter_segment_ms(addr, OFFSETS)? == 0,
        "IncrementalAlterConfigs on {OFFSETS}"
    );

    // Nothing changed: the topic, its 50 partitions and the commit are all still there.
    let metadata = kafka_client::metadata(addr)?;
    let offsets_topic = metadata
        .topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == OFFSETS))
        .context("__consumer_offsets is gone")?;
    ensure!(
        offsets_topic.is_internal && offsets_topic.partitions.len() == 50,
        "{offsets_topic:?}"
    );
    let committed = committed_offsets(&node.bootstrap(), &group, "orders", 1)?;
    ensure!(
        committed == BTreeMap::from([(0, Some(42))]),
        "committed offsets: {committed:?}"
    );
    node.assert_running()
}

/// IncrementalAlterConfigs v1 SET segment.ms on topic `topic`: the resource's error code.
fn alter_segment_ms(addr: SocketAddr, topic: &str) -> Result<i16> {
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![AlterConfigsResource::default()
        .with_resource_type(2)
        .with_resource_name(StrBytes::from_string(topic.to_string()))
        .with_configs(vec![AlterableConfig::default()
            .with_name(StrBytes::from_static_str("segment.ms"))
            .with_config_operation(0)
            .with_value(Some(StrBytes::from_static_str("3600000")))])]);
    let response = kafka_client::call(addr, &request, 1, TIMEOUT)?;
    Ok(response
        .responses
        .first()
        .context("no IncrementalAlterConfigs result")?
        .error_code)
}
