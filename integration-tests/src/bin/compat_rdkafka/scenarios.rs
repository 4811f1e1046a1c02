//! The matrix scenarios, each returning a pass note or the reason it failed.

use std::time::Duration;

use anyhow::{anyhow, bail, ensure, Context, Result};
use rdkafka::admin::{AlterConfig, ConfigSource, NewPartitions, ResourceSpecifier};
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use crate::client::*;
use crate::Opts;

pub async fn run(id: &str, opts: &Opts) -> Result<String> {
    match id {
        "metadata" => metadata(opts).await,
        "admin_topics" => admin_topics(opts).await,
        "produce_acks0" => produce_verify(opts, "acks0", 100, &[("acks", "0")]).await,
        "produce_acks1" => produce_verify(opts, "acks1", 100, &[("acks", "1")]).await,
        "produce_acksall" => produce_verify(opts, "acksall", 100, &[("acks", "all")]).await,
        "compression_gzip" | "compression_snappy" | "compression_lz4" | "compression_zstd" => {
            let codec = &id["compression_".len()..];
            produce_verify(opts, id, 100, &[("acks", "all"), ("compression.codec", codec)]).await
        }
        "idempotent_produce" => {
            produce_verify(
                opts,
                "idempotent",
                1000,
                &[("enable.idempotence", "true"), ("acks", "all")],
            )
            .await
        }
        "group_resume" => group_resume(opts).await,
        "two_groups" => two_groups(opts).await,
        "groups_describe_lag" => groups_describe_lag(opts).await,
        "offsets_for_times" => offsets_for_times(opts).await,
        "delete_records" => delete_records(opts).await,
        "empty_topic" => empty_topic(opts).await,
        "many_topics" => many_topics(opts).await,
        "regex_subscribe" => regex_subscribe(opts).await,
        "transactions_commit_abort" => crate::tx::commit_abort(opts).await,
        "read_committed" => crate::tx::read_committed(opts).await,
        "consume_transform_produce" => crate::tx::consume_transform_produce(opts).await,
        "sasl_ssl_scram512" | "sasl_ssl_plain" | "sasl_plaintext_scram256" | "ssl_mtls" | "oauthbearer" => {
            crate::secure::round_trip(opts, id).await
        }
        "sasl_wrong_password" => crate::secure::wrong_password(opts).await,
        "group_kip848" => crate::groups::group_kip848(opts).await,
        "group_migration" => crate::groups::group_migration(opts).await,
        "share_group" => crate::groups::share_group().await,
        "fetch_from_follower" => crate::groups::fetch_from_follower(opts).await,
        _ => bail!("this adapter does not know scenario {id}"),
    }
}

async fn metadata(opts: &Opts) -> Result<String> {
    let topic = format!("{}metadata", opts.prefix);
    create_topic(opts, &topic, 1).await?;
    let md = admin(opts)?
        .inner()
        .fetch_metadata(Some(&topic), CALL)
        .context("metadata")?;
    let mut listed: Vec<String> = md
        .brokers()
        .iter()
        .map(|b| format!("{}:{}", b.host(), b.port()))
        .collect();
    let mut want: Vec<String> = opts.bootstrap.split(',').map(str::to_owned).collect();
    listed.sort();
    want.sort();
    ensure!(listed == want, "metadata lists brokers {listed:?}, want {want:?}");
    let t = md
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .context("created topic missing from metadata")?;
    ensure!(
        t.error().is_none() && t.partitions().len() == 1,
        "topic in metadata: error {:?}, {} partitions; want 1 partition",
        t.error(),
        t.partitions().len()
    );
    Ok(String::new())
}

/// Runs every step even after one fails (each later step needs only the topic), so one
/// answer shows all that differs; the first failures are reported together.
async fn admin_topics(opts: &Opts) -> Result<String> {
    let topic = format!("{}admin", opts.prefix);
    create_topic(opts, &topic, 3).await?;
    let admin = admin(opts)?;
    let mut failures = Vec::new();

    let alter = AlterConfig::new(ResourceSpecifier::Topic(&topic)).set("retention.ms", "3600000");
    match admin.alter_configs([&alter], &admin_options()).await {
        Ok(rs) => match rs.as_slice() {
            [Ok(_)] => {}
            other => failures.push(format!(
                "alter configs (AlterConfigs, the only call rust-rdkafka has): {other:?}"
            )),
        },
        Err(e) => failures.push(format!(
            "alter configs (AlterConfigs, the only call rust-rdkafka has): {e}"
        )),
    }
    if failures.is_empty() {
        if let Err(e) = expect_retention(&admin, &topic).await {
            failures.push(format!("{e:#}"));
        }
    }

    let grow = NewPartitions::new(&topic, 5);
    match admin.create_partitions([&grow], &admin_options()).await {
        Ok(rs) if matches!(rs.as_slice(), [Ok(_)]) => {
            if let Err(e) = await_leaders(opts, &[topic.clone()], 5).await {
                failures.push(format!("after create partitions: {e:#}"));
            }
        }
        other => failures.push(format!("create partitions to 5: {other:?}")),
    }

    match admin.delete_topics(&[topic.as_str()], &admin_options()).await {
        Ok(rs) if matches!(rs.as_slice(), [Ok(_)]) => {
            if let Err(e) = await_gone(opts, &[topic.clone()]).await {
                failures.push(format!("{e:#}"));
            }
        }
        other => failures.push(format!("delete topic: {other:?}")),
    }
    ensure!(failures.is_empty(), "{}", failures.join("; "));
    Ok(String::new())
}

async fn expect_retention(
    admin: &rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext>,
    topic: &str,
) -> Result<()> {
    let rs = admin
        .describe_configs([&ResourceSpecifier::Topic(topic)], &admin_options())
        .await
        .context("describe configs")?;
    let resource = match rs.as_slice() {
        [Ok(r)] => r,
        other => bail!("describe configs: {other:?}"),
    };
    let entry = resource
        .get("retention.ms")
        .context("describe configs has no retention.ms")?;
    ensure!(
        entry.value.as_deref() == Some("3600000") && entry.source == ConfigSource::DynamicTopic,
        "describe configs: retention.ms = {:?} from {:?}, want 3600000 from DynamicTopic",
        entry.value,
        entry.source
    );
    Ok(())
}

/// Waits until metadata answers UNKNOWN_TOPIC_OR_PARTITION (or omits the topic) for each.
async fn await_gone(opts: &Opts, topics: &[String]) -> Result<()> {
    let admin = admin(opts)?;
    let mut left = Vec::new();
    for _ in 0..100 {
        let md = admin.inner().fetch_metadata(None, CALL).context("metadata")?;
        left = md
            .topics()
            .iter()
            .filter(|t| topics.iter().any(|n| n == t.name()))
            .filter(|t| t.error() != Some(rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART))
            .map(|t| t.name().to_owned())
            .collect::<Vec<_>>();
        if left.is_empty() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("{} deleted topics still listed, e.g. {:?}", left.len(), left.first())
}

async fn produce_verify(opts: &Opts, name: &str, n: usize, settings: &[(&str, &str)]) -> Result<String> {
    let topic = format!("{}{name}", opts.prefix);
    create_topic(opts, &topic, 1).await?;
    let sent = test_records(n);
    produce(&producer(opts, settings)?, &topic, &sent).await?;
    read_back(opts, &topic, Offset::Beginning, &sent).await?;
    Ok(String::new())
}

/// A group member subscribed to `topic`. Two non-defaults: auto.offset.reset=earliest, as
/// librdkafka starts a new group at the end and the scenarios read what is already there; and
/// no auto-commit, so the scenario commits exactly what it means: rust-rdkafka's drop drains
/// the prefetched messages, which stores their offsets, and the closing auto-commit would then
/// commit the end of the partition instead of the offset the scenario committed.
fn member(opts: &Opts, group: &str, topic: &str, extra: &[(&str, &str)]) -> Result<StreamConsumer> {
    let mut settings = vec![
        ("group.id", group),
        ("auto.offset.reset", "earliest"),
        ("enable.auto.commit", "false"),
    ];
    settings.extend_from_slice(extra);
    let c: StreamConsumer = config(opts, &settings)
        .create()
        .context("cannot create the group consumer")?;
    c.subscribe(&[topic]).context("subscribe")?;
    Ok(c)
}

/// Receives `n` records in the group and commits what was consumed (offset `n`).
async fn consume_and_commit(c: &StreamConsumer, n: usize, sent: &[TestRecord]) -> Result<()> {
    let got = receive(c, n, Duration::from_secs(25)).await?;
    same_records(&sent[..n], &got)?;
    c.commit_consumer_state(CommitMode::Sync).context("commit")
}

/// Closes a consumer (LeaveGroup) off the async threads: librdkafka's close blocks.
async fn close(c: StreamConsumer) -> Result<()> {
    tokio::task::spawn_blocking(move || drop(c))
        .await
        .context("closing the consumer panicked")
}

async fn group_resume(opts: &Opts) -> Result<String> {
    let (topic, group) = (format!("{}resume", opts.prefix), format!("{}resume-group", opts.prefix));
    let sent = test_records(100);
    topic_with(opts, &topic, &sent).await?;
    let first = member(opts, &group, &topic, &[])?;
    let done = consume_and_commit(&first, 50, &sent).await;
    close(first).await?;
    done.context("first consumer")?;
    let second = member(opts, &group, &topic, &[])?;
    let got = receive(&second, 50, Duration::from_secs(25))
        .await
        .context("second consumer")?;
    close(second).await?;
    same_records(&sent[50..], &got).context("second consumer")?;
    Ok(String::new())
}

async fn two_groups(opts: &Opts) -> Result<String> {
    let topic = format!("{}twogroups", opts.prefix);
    let sent = test_records(100);
    topic_with(opts, &topic, &sent).await?;
    let read = |g: &'static str| {
        let (topic, sent) = (&topic, &sent);
        async move {
            let group = format!("{}twogroups-{g}", opts.prefix);
            let c = member(opts, &group, topic, &[])?;
            let got = receive(&c, 100, Duration::from_secs(25)).await;
            close(c).await?;
            same_records(sent, &got?).with_context(|| format!("group {group}"))
        }
    };
    let (a, b) = tokio::join!(read("a"), read("b"));
    a.and(b)?;
    Ok(String::new())
}

async fn groups_describe_lag(opts: &Opts) -> Result<String> {
    let (topic, group) = (format!("{}lag", opts.prefix), format!("{}lag-group", opts.prefix));
    let sent = test_records(100);
    topic_with(opts, &topic, &sent).await?;
    let live = member(opts, &group, &topic, &[])?;
    consume_and_commit(&live, 60, &sent).await?;
    let result = describe_and_lag(opts, &group, &topic);
    close(live).await?;
    result
}

/// rust-rdkafka has no admin call for groups: its client's group list (ListGroups +
/// DescribeGroups) and a consumer's committed offsets and watermarks stand in.
fn describe_and_lag(opts: &Opts, group: &str, topic: &str) -> Result<String> {
    let admin = admin(opts)?;
    let all = admin.inner().fetch_group_list(None, CALL).context("list groups")?;
    ensure!(
        all.groups().iter().any(|g| g.name() == group),
        "list groups does not show {group}"
    );
    let one = admin
        .inner()
        .fetch_group_list(Some(group), CALL)
        .context("describe group")?;
    let g = one.groups().first().context("describe group returned no group")?;
    ensure!(
        g.state() == "Stable" && g.members().len() == 1,
        "describe group: state {:?} with {} members, want Stable with 1 (the live consumer)",
        g.state(),
        g.members().len()
    );
    let reader: StreamConsumer = config(opts, &[("group.id", group)]).create()?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, 0);
    let committed = reader.committed_offsets(tpl, CALL).context("committed offsets")?;
    let at = committed.find_partition(topic, 0).map(|p| p.offset());
    let (_, end) = reader.fetch_watermarks(topic, 0, CALL).context("watermarks")?;
    match at {
        Some(Offset::Offset(c)) if c == 60 && end - c == 40 => Ok(String::new()),
        other => bail!("committed {other:?}, end offset {end}; want committed 60 and lag 40"),
    }
}

async fn offsets_for_times(opts: &Opts) -> Result<String> {
    let topic = format!("{}times", opts.prefix);
    let mut sent = test_records(3);
    let t0 = sent[0].timestamp;
    for (i, r) in sent.iter_mut().enumerate() {
        r.timestamp = t0 + 1000 * i as i64;
    }
    topic_with(opts, &topic, &sent).await?;
    let c = assigned_consumer(opts, &topic, Offset::Beginning)?;
    for (at, want) in [
        (t0 + 500, Offset::Offset(1)),
        (t0 + 2000, Offset::Offset(2)),
        (t0 + 3000, Offset::End),
    ] {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&topic, 0, Offset::Offset(at))?;
        let got = c
            .offsets_for_times(tpl, CALL)
            .with_context(|| format!("offsets for time t0+{}", at - t0))?;
        let p = got
            .find_partition(&topic, 0)
            .context("offsets for times: partition missing")?;
        p.error().with_context(|| format!("offsets for time t0+{}", at - t0))?;
        ensure!(
            p.offset() == want,
            "offsets for time t0+{}: {:?}, want {want:?}",
            at - t0,
            p.offset()
        );
    }
    Ok("past the last record answers Offset::End (-1)".into())
}

async fn delete_records(opts: &Opts) -> Result<String> {
    let topic = format!("{}delrecords", opts.prefix);
    let sent = test_records(100);
    topic_with(opts, &topic, &sent).await?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&topic, 0, Offset::Offset(30))?;
    let admin = admin(opts)?;
    let result = admin
        .delete_records(&tpl, &admin_options())
        .await
        .context("delete records before offset 30")?;
    result
        .find_partition(&topic, 0)
        .context("delete records: partition missing from the result")?
        .error()
        .context("delete records before offset 30")?;
    let (low, _) = admin.inner().fetch_watermarks(&topic, 0, CALL).context("watermarks")?;
    ensure!(low == 30, "low watermark after delete records: {low}, want 30");
    read_back(opts, &topic, Offset::Beginning, &sent[30..]).await?;
    Ok(String::new())
}

async fn empty_topic(opts: &Opts) -> Result<String> {
    let topic = format!("{}empty", opts.prefix);
    create_topic(opts, &topic, 1).await?;
    let readers = [("from the beginning", Offset::Beginning), ("from the end", Offset::End)]
        .map(|(name, at)| assigned_consumer(opts, &topic, at).map(|c| (name, c)));
    let readers = readers.into_iter().collect::<Result<Vec<_>>>()?;
    for (name, c) in &readers {
        expect_nothing(c, Duration::from_millis(1500), |_| false)
            .await
            .with_context(|| format!("consumer {name} on the empty topic"))?;
    }
    let sent = test_records(1);
    produce(&producer(opts, &[])?, &topic, &sent).await?;
    for (name, c) in &readers {
        let got = receive(c, 1, Duration::from_secs(10))
            .await
            .with_context(|| format!("consumer {name}"))?;
        same_records(&sent, &got).with_context(|| format!("consumer {name}"))?;
    }
    Ok(String::new())
}

/// Fails on any record, or any consumer error `ignore` does not accept, within `d`.
async fn expect_nothing(c: &StreamConsumer, d: Duration, ignore: impl Fn(&KafkaError) -> bool) -> Result<()> {
    let deadline = tokio::time::Instant::now() + d;
    loop {
        match tokio::time::timeout_at(deadline, c.recv()).await {
            Err(_) => return Ok(()),
            Ok(Ok(m)) => bail!(
                "got a record at offset {}, want none",
                rdkafka::message::Message::offset(&m)
            ),
            Ok(Err(e)) if ignore(&e) => eprintln!("[rdkafka-rust] ignored consumer error: {e}"),
            Ok(Err(e)) => bail!("consumer error: {e}"),
        }
    }
}

async fn many_topics(opts: &Opts) -> Result<String> {
    let topics: Vec<String> = (0..200).map(|i| format!("{}many-{i:03}", opts.prefix)).collect();
    let admin = admin(opts)?;
    let start = std::time::Instant::now();
    for batch in topics.chunks(50) {
        send_create_topics(opts, batch, 1).await?;
    }
    // Each try is one Metadata request for all topics (rust-rdkafka asks for all or one).
    await_leaders(opts, &topics, 1).await?;
    let ready = start.elapsed();
    for batch in topics.chunks(50) {
        let names: Vec<&str> = batch.iter().map(String::as_str).collect();
        for r in admin
            .delete_topics(&names, &admin_options())
            .await
            .context("delete topics")?
        {
            r.map_err(|(t, code)| anyhow!("delete topic {t}: {code:?}"))?;
        }
    }
    await_gone(opts, &topics).await?;
    Ok(format!("200 topics with leaders after {ready:?}"))
}

async fn regex_subscribe(opts: &Opts) -> Result<String> {
    let topic = format!("{}regex-late", opts.prefix);
    let pattern = format!("^{}regex-.*", regex_quote(&opts.prefix));
    let group = format!("{}regex-group", opts.prefix);
    // The one allowed non-default: librdkafka rescans regex subscriptions every
    // topic.metadata.refresh.interval.ms (default 5 min).
    let c = member(
        opts,
        &group,
        &pattern,
        &[("topic.metadata.refresh.interval.ms", "2000")],
    )?;
    // While nothing matches, librdkafka itself reports "Subscribed topic not available:
    // <pattern>: Unknown topic or partition" as a consumer error; it is informational (the
    // same against Kafka) and the subscription stays active.
    let not_yet = |e: &KafkaError| {
        matches!(
            e,
            KafkaError::MessageConsumption(RDKafkaErrorCode::UnknownTopicOrPartition)
        )
    };
    expect_nothing(&c, Duration::from_secs(1), not_yet)
        .await
        .context("regex consumer before the topic exists")?;
    let sent = test_records(1);
    topic_with(opts, &topic, &sent).await?;
    let start = std::time::Instant::now();
    let got = receive_ignoring(&c, 1, Duration::from_secs(20), not_yet)
        .await
        .context("regex consumer");
    close(c).await?;
    same_records(&sent, &got?)?;
    Ok(format!("record arrived {:?} after it was produced", start.elapsed()))
}

/// Escapes regex metacharacters of a literal prefix.
fn regex_quote(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            if r"\.+*?()|[]{}^$".contains(c) {
                vec!['\\', c]
            } else {
                vec![c]
            }
        })
        .collect()
}
