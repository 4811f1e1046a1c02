//! Admin APIs through rdkafka's AdminClient and consumer metadata calls: CreateTopics (configs,
//! validate-only), DeleteTopics, CreatePartitions, DescribeConfigs, ListOffsets and auto-creation.
//!
//! IncrementalAlterConfigs is not in rdkafka 0.39 (its `alter_configs` is the legacy,
//! non-incremental AlterConfigs, which the broker does not implement); it is tested from
//! confluent-kafka-python in `integration-tests/python/test_confluent_kafka.py`.

use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use rdkafka::admin::{ConfigSource, NewPartitions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::consumer::Consumer;
use rdkafka::message::Message;
use rdkafka::producer::{FutureRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use sluice_integration_tests::{clients, NodeOptions, SluiceNode};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_topics_validate_only_reports_success_but_creates_nothing() -> Result<()> {
    let node = SluiceNode::start(NodeOptions::default())?;
    let admin = clients::admin_client(&node.bootstrap())?;
    let topic = NewTopic::new("dry-run", 4, TopicReplication::Fixed(1)).set("retention.ms", "60000");
    let results = admin
        .create_topics([&topic], &clients::admin_options().validate_only(true))
        .await?;
    ensure!(
        results == vec![Ok("dry-run".to_string())],
        "validate-only CreateTopics: {results:?}"
    );
    let consumer = clients::base_consumer(&node.bootstrap())?;
    ensure!(
        clients::partition_count(&consumer, "dry-run")?.is_none(),
        "validate_only created the topic"
    );

    // Validation still rejects what a real create would reject.
    let bad = NewTopic::new("dry-run-bad", 1, TopicReplication::Fixed(1)).set("retention.ms", "not-a-number");
    let results = admin
        .create_topics([&bad], &clients::admin_options().validate_only(true))
        .await?;
    ensure!(
        matches!(results.as_slice(), [Err((n, RDKafkaErrorCode::InvalidConfig))] if n == "dry-run-bad"),
        "validate-only with retention.ms=not-a-number: {results:?}"
    );

    // And the same request without validate_only really creates it.
    clients::create_topic(&admin, "dry-run", 4, &[("retention.ms", "60000")]).await?;
    ensure!(
        clients::partition_count(&consumer, "dry-run")? == Some(4),
        "topic not created for real"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_existing_topic_fails_topic_already_exists() -> Result<()> {
    let node = SluiceNode::start(NodeOptions::default())?;
    let admin = clients::admin_client(&node.bootstrap())?;
    clients::create_topic(&admin, "twice", 2, &[]).await?;
    let topic = NewTopic::new("twice", 2, TopicReplication::Fixed(1));
    let results = admin.create_topics([&topic], &clients::admin_options()).await?;
    ensure!(
        matches!(results.as_slice(), [Err((n, RDKafkaErrorCode::TopicAlreadyExists))] if n == "twice"),
        "second CreateTopics: {results:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_topics_removes_topic_from_metadata_and_unknown_topic_fails() -> Result<()> {
    let node = SluiceNode::start(NodeOptions::default())?;
    let admin = clients::admin_client(&node.bootstrap())?;
    clients::create_topic(&admin, "doomed", 2, &[]).await?;
    clients::create_topic(&admin, "survivor", 1, &[]).await?;
    let producer = clients::future_producer(&node.bootstrap())?;
    producer
        .send(
            FutureRecord::<str, str>::to("doomed").partition(1).payload("x"),
            Duration::from_secs(5),
        )
        .await
        .map_err(|(e, _)| anyhow::anyhow!("produce: {e}"))?;
    drop(producer); // a producer would re-create the topic by auto-creation on its next Metadata

    let results = admin
        .delete_topics(&["doomed", "never-existed"], &clients::admin_options())
        .await?;
    ensure!(
        results.len() == 2,
        "DeleteTopics returned {} results for 2 topics: {results:?}",
        results.len()
    );
    ensure!(
        results.contains(&Ok("doomed".to_string())),
        "delete doomed: {results:?}"
    );
    ensure!(
        results.contains(&Err((
            "never-existed".to_string(),
            RDKafkaErrorCode::UnknownTopicOrPartition
        ))),
        "delete never-existed: {results:?}"
    );
    let consumer = clients::base_consumer(&node.bootstrap())?;
    clients::wait_until(Duration::from_secs(15), "doomed to leave metadata", || {
        clients::partition_count(&consumer, "doomed")
            .ok()
            .flatten()
            .is_none()
            .then_some(())
    })?;
    ensure!(
        clients::partition_count(&consumer, "survivor")? == Some(1),
        "deleting doomed affected survivor"
    );

    // Re-creating the name gives a fresh, empty topic.
    clients::create_topic(&admin, "doomed", 1, &[]).await?;
    let (low, high) = consumer.fetch_watermarks("doomed", 0, Duration::from_secs(5))?;
    ensure!((low, high) == (0, 0), "re-created topic has watermarks ({low}, {high})");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_partitions_grows_3_to_6_and_partition_5_accepts_records() -> Result<()> {
    let node = SluiceNode::start(NodeOptions::default())?;
    let admin = clients::admin_client(&node.bootstrap())?;
    clients::create_topic(&admin, "growing", 3, &[]).await?;
    let results = admin
        .create_partitions([&NewPartitions::new("growing", 6)], &clients::admin_options())
        .await?;
    ensure!(
        results == vec![Ok("growing".to_string())],
        "CreatePartitions: {results:?}"
    );
    let consumer = clients::base_consumer(&node.bootstrap())?;
    ensure!(
        clients::partition_count(&consumer, "growing")? == Some(6),
        "metadata after CreatePartitions"
    );

    // Shrinking is not allowed.
    let results = admin
        .create_partitions([&NewPartitions::new("growing", 2)], &clients::admin_options())
        .await?;
    ensure!(
        matches!(results.as_slice(), [Err((_, RDKafkaErrorCode::InvalidPartitions))]),
        "CreatePartitions 6 -> 2: {results:?}"
    );

    let producer = clients::future_producer(&node.bootstrap())?;
    let d = producer
        .send(
            FutureRecord::<str, str>::to("growing")
                .partition(5)
                .key("k5")
                .payload("in partition 5"),
            Duration::from_secs(10),
        )
        .await
        .map_err(|(e, _)| anyhow::anyhow!("produce to partition 5: {e}"))?;
    ensure!(
        d.partition == 5 && d.offset == 0,
        "delivered to {}/{}",
        d.partition,
        d.offset
    );
    let stream = clients::stream_consumer(&node.bootstrap())?;
    clients::assign(&stream, "growing", &[5], Offset::Offset(0))?;
    let m = tokio::time::timeout(Duration::from_secs(20), stream.recv())
        .await
        .context("consume partition 5")??;
    ensure!(
        m.partition() == 5 && m.offset() == 0 && m.payload() == Some(b"in partition 5"),
        "read back {m:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_configs_reports_topic_overrides_broker_settings_and_defaults_with_source() -> Result<()> {
    // A static broker setting must show through as the topic's value with source STATIC_BROKER.
    let node = SluiceNode::start(NodeOptions::default().set("log.segment.bytes", 2_097_152))?;
    let admin = clients::admin_client(&node.bootstrap())?;
    clients::create_topic(&admin, "described", 1, &[("retention.ms", "3600000")]).await?;
    let res = admin
        .describe_configs([&ResourceSpecifier::Topic("described")], &clients::admin_options())
        .await?;
    ensure!(res.len() == 1, "{} resources", res.len());
    let res = res
        .into_iter()
        .next()
        .expect("one")
        .map_err(|e| anyhow::anyhow!("DescribeConfigs: {e:?}"))?;

    let get = |name: &str| res.get(name).with_context(|| format!("DescribeConfigs lacks {name}"));
    let retention = get("retention.ms")?;
    ensure!(
        retention.value.as_deref() == Some("3600000")
            && retention.source == ConfigSource::DynamicTopic
            && !retention.is_default,
        "retention.ms: {retention:?}"
    );
    let segment = get("segment.bytes")?;
    ensure!(
        segment.value.as_deref() == Some("2097152")
            && segment.source == ConfigSource::StaticBroker
            && !segment.is_default,
        "segment.bytes with --set log.segment.bytes=2097152: {segment:?}"
    );
    let cleanup = get("cleanup.policy")?;
    ensure!(
        cleanup.value.as_deref() == Some("delete") && cleanup.source == ConfigSource::Default && cleanup.is_default,
        "cleanup.policy: {cleanup:?}"
    );
    // Every config is listed (tools read-modify-write on this output), each with a value.
    for name in [
        "retention.bytes",
        "max.message.bytes",
        "segment.ms",
        "min.insync.replicas",
        "compression.type",
        "message.timestamp.type",
    ] {
        let e = get(name)?;
        ensure!(e.value.is_some(), "{name} has no value: {e:?}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_offsets_by_timestamp_and_watermarks_match_produced_records() -> Result<()> {
    let node = SluiceNode::start(NodeOptions::default())?;
    let admin = clients::admin_client(&node.bootstrap())?;
    clients::create_topic(&admin, "timed", 1, &[]).await?;
    let producer = clients::future_producer(&node.bootstrap())?;
    let t0 = clients::now_ms() - 600_000;
    // Ten records one second apart, each in its own request (its own batch), so the lookup must
    // find the right batch and the right record.
    for i in 0..10i64 {
        let d = producer
            .send(
                FutureRecord::<str, str>::to("timed")
                    .partition(0)
                    .payload(&format!("r{i}"))
                    .timestamp(t0 + i * 1000),
                Duration::from_secs(5),
            )
            .await
            .map_err(|(e, _)| anyhow::anyhow!("produce: {e}"))?;
        ensure!(d.offset == i, "record {i} at offset {}", d.offset);
    }
    let consumer = clients::base_consumer(&node.bootstrap())?;
    let (low, high) = consumer.fetch_watermarks("timed", 0, Duration::from_secs(5))?;
    ensure!((low, high) == (0, 10), "watermarks ({low}, {high}), want (0, 10)");

    // (target timestamp, expected offset): first offset whose timestamp is >= target.
    let cases = [
        (t0 - 5000, Offset::Offset(0)),
        (t0, Offset::Offset(0)),
        (t0 + 3500, Offset::Offset(4)),
        (t0 + 9000, Offset::Offset(9)),
        (t0 + 9001, Offset::End),
    ];
    for (ts, want) in cases {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset("timed", 0, Offset::Offset(ts))?;
        let got = consumer.offsets_for_times(tpl, Duration::from_secs(5))?;
        let elem = got.find_partition("timed", 0).context("no result for timed/0")?;
        ensure!(elem.error().is_ok(), "offsets_for_times({ts}): {:?}", elem.error());
        ensure!(
            elem.offset() == want,
            "offsets_for_times(t0{:+}): {:?}, want {want:?}",
            ts - t0,
            elem.offset()
        );
    }
    Ok(())
}

/// The issue's case: one batch holding a record at timestamp 1234 (offset 0) and one at
/// 999999999999 (offset 1). Asking for 999999999999 must answer offset 1, the record, not the
/// batch's first offset, or a consumer seeking by time re-reads earlier records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_offsets_by_timestamp_finds_the_record_inside_a_batch() -> Result<()> {
    let node = SluiceNode::start(NodeOptions::default())?;
    let admin = clients::admin_client(&node.bootstrap())?;
    clients::create_topic(&admin, "timed-batch", 1, &[]).await?;
    let mut config = clients::producer_config(&node.bootstrap());
    config.set("linger.ms", "500");
    let producer: rdkafka::producer::FutureProducer = config.create()?;
    // Both enqueued before either is sent (send_result enqueues at once), so with a long
    // linger they travel in one batch.
    let mut deliveries = Vec::new();
    for ts in [1234i64, 999_999_999_999] {
        let record = FutureRecord::<str, str>::to("timed-batch")
            .partition(0)
            .payload("r")
            .timestamp(ts);
        deliveries.push(
            producer
                .send_result(record)
                .map_err(|(e, _)| anyhow::anyhow!("enqueue: {e}"))?,
        );
    }
    let mut offsets = Vec::new();
    for delivery in deliveries {
        let d = delivery.await?.map_err(|(e, _)| anyhow::anyhow!("produce: {e}"))?;
        offsets.push(d.offset);
    }
    ensure!(offsets == [0, 1], "records at offsets {offsets:?}, want [0, 1]");
    let consumer = clients::base_consumer(&node.bootstrap())?;
    for (ts, want) in [(1234, 0), (999_999_999_999, 1), (1235, 1)] {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset("timed-batch", 0, Offset::Offset(ts))?;
        let got = consumer.offsets_for_times(tpl, Duration::from_secs(5))?;
        let elem = got
            .find_partition("timed-batch", 0)
            .context("no result for timed-batch/0")?;
        ensure!(
            elem.offset() == Offset::Offset(want),
            "offsets_for_times({ts}): {:?}, want offset {want}",
            elem.offset()
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_to_unknown_topic_auto_creates_it_with_num_partitions() -> Result<()> {
    let node = SluiceNode::start(NodeOptions::default().set("num.partitions", 4))?;
    let producer = clients::future_producer(&node.bootstrap())?;
    let d = producer
        .send(
            FutureRecord::<str, str>::to("auto-made").key("k").payload("v"),
            Duration::from_secs(10),
        )
        .await
        .map_err(|(e, _)| anyhow::anyhow!("produce to unknown topic: {e}"))?;
    ensure!(
        (0..4).contains(&d.partition) && d.offset == 0,
        "delivered to {}/{}",
        d.partition,
        d.offset
    );
    let consumer = clients::base_consumer(&node.bootstrap())?;
    ensure!(
        clients::partition_count(&consumer, "auto-made")? == Some(4),
        "auto-created topic partitions"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_create_disabled_leaves_unknown_topic_unknown() -> Result<()> {
    let node = SluiceNode::start(NodeOptions::default().set("auto.create.topics.enable", "false"))?;
    // A producer's Metadata request asks for auto-creation; the broker must decline.
    let producer = clients::future_producer(&node.bootstrap())?;
    let md = producer
        .client()
        .fetch_metadata(Some("not-made"), Duration::from_secs(5))?;
    let t = md.topics().iter().find(|t| t.name() == "not-made");
    match t.map(|t| t.error()) {
        Some(Some(e)) if rdkafka::error::RDKafkaErrorCode::from(e) == RDKafkaErrorCode::UnknownTopicOrPartition => {}
        other => bail!("metadata for not-made with auto-create off: {other:?}"),
    }
    let consumer = clients::base_consumer(&node.bootstrap())?;
    ensure!(
        clients::partition_count(&consumer, "not-made")?.is_none(),
        "topic was created anyway"
    );
    Ok(())
}

#[test]
fn describe_configs_with_documentation_says_what_each_broker_and_topic_setting_means() -> Result<()> {
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::DescribeConfigsRequest;
    use kafka_protocol::protocol::StrBytes;
    use sluice_integration_tests::kafka_client;

    let node = SluiceNode::start(NodeOptions::default())?;
    ensure!(kafka_client::create_topic(node.addr(), "documented", 1, Duration::from_secs(15))? == 0);
    let describe = |resource_type: i8, name: &str, documentation: bool| {
        let request = DescribeConfigsRequest::default()
            .with_include_documentation(documentation)
            .with_resources(vec![DescribeConfigsResource::default()
                .with_resource_type(resource_type)
                .with_resource_name(StrBytes::from_string(name.to_string()))
                .with_configuration_keys(None)]);
        kafka_client::call(node.addr(), &request, 4, Duration::from_secs(10))
    };
    for (resource_type, name, settings) in [
        (4, "1", ["num.partitions", "log.retention.ms", "log.cleaner.backoff.ms"]),
        (2, "documented", ["retention.ms", "cleanup.policy", "segment.bytes"]),
    ] {
        let response = describe(resource_type, name, true)?;
        let configs = &response.results.first().context("a result")?.configs;
        for setting in settings {
            let entry = configs
                .iter()
                .find(|c| c.name.as_str() == setting)
                .with_context(|| format!("{setting} not described"))?;
            let doc = entry.documentation.as_deref().unwrap_or_default();
            ensure!(doc.len() > 10, "{setting} has no documentation: {entry:?}");
            // Typed as Kafka types them (2 = STRING for everything was the old answer).
            ensure!(
                entry.config_type != 2 || setting == "cleanup.policy",
                "{setting}: {entry:?}"
            );
        }
        // Asked without it, there is none, as Kafka answers.
        let plain = describe(resource_type, name, false)?;
        ensure!(
            plain.results[0].configs.iter().all(|c| c.documentation.is_none()),
            "documentation without include_documentation"
        );
    }
    Ok(())
}
