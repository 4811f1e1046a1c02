//! `__consumer_offsets` is compacted: however often a group commits, the topic keeps only the
//! latest commit per partition (plus what the cleaner has not reached yet), and the offsets
//! survive cleaning and a restart.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::offset_fetch_request::{OffsetFetchRequestGroup, OffsetFetchRequestTopics};
use kafka_protocol::messages::{FindCoordinatorRequest, GroupId, OffsetCommitRequest, OffsetFetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use sluice_integration_tests::{kafka_client, NodeOptions, SluiceNode};

const TIMEOUT: Duration = Duration::from_secs(20);
const GROUP: &str = "busy-committer";
const TOPIC: &str = "committed-often";
const PARTITIONS: i32 = 12;
const SEGMENT_BYTES: u64 = 64 * 1024;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// A standalone commit (generation -1, as `kafka-consumer-groups --reset-offsets` makes) of
/// `offset` for every partition.
fn commit_all(node: &SluiceNode, offset: i64) -> Result<()> {
    let partitions = (0..PARTITIONS)
        .map(|p| {
            OffsetCommitRequestPartition::default()
                .with_partition_index(p)
                .with_committed_offset(offset)
                .with_committed_leader_epoch(-1)
                .with_committed_metadata(Some(s("")))
        })
        .collect();
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(s(GROUP)))
        .with_generation_id_or_member_epoch(-1)
        .with_member_id(s(""))
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(TopicName(s(TOPIC)))
            .with_partitions(partitions)]);
    let response = kafka_client::call(node.addr(), &request, 8, TIMEOUT)?;
    for p in &response.topics[0].partitions {
        ensure!(
            p.error_code == 0,
            "commit of {offset}: partition {} error {}",
            p.partition_index,
            p.error_code
        );
    }
    Ok(())
}

fn committed(node: &SluiceNode) -> Result<Vec<i64>> {
    let request = OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
        .with_group_id(GroupId(s(GROUP)))
        .with_topics(Some(vec![OffsetFetchRequestTopics::default()
            .with_name(TopicName(s(TOPIC)))
            .with_partition_indexes((0..PARTITIONS).collect())]))]);
    let response = kafka_client::call(node.addr(), &request, 8, TIMEOUT)?;
    let group = response.groups.first().context("no group")?;
    ensure!(group.error_code == 0, "OffsetFetch error {}", group.error_code);
    Ok(group.topics[0].partitions.iter().map(|p| p.committed_offset).collect())
}

/// Bytes of every `.log` segment of `__consumer_offsets` on disk.
fn offsets_topic_bytes(data_dir: &Path) -> Result<u64> {
    let mut total = 0;
    for dir in std::fs::read_dir(data_dir)? {
        let dir = dir?;
        if !dir.file_name().to_string_lossy().starts_with("__consumer_offsets-") {
            continue;
        }
        for file in std::fs::read_dir(dir.path())? {
            let file = file?;
            if sluice_integration_tests::faults::is_segment_log_file(&file.file_name().to_string_lossy()) {
                total += file.metadata()?.len();
            }
        }
    }
    Ok(total)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_offsets_topic_stays_small_while_a_group_commits_every_10_ms_for_a_minute() -> Result<()> {
    let mut node = SluiceNode::start(
        NodeOptions::default()
            .set("offsets.topic.segment.bytes", SEGMENT_BYTES)
            .set("log.cleaner.backoff.ms", 200),
    )?;
    ensure!(
        kafka_client::create_topic(node.addr(), TOPIC, PARTITIONS, TIMEOUT)? == 0,
        "create {TOPIC}"
    );
    // FindCoordinator creates __consumer_offsets; commits need its partition loaded.
    let find = FindCoordinatorRequest::default()
        .with_key_type(0)
        .with_coordinator_keys(vec![s(GROUP)]);
    let deadline = Instant::now() + TIMEOUT;
    while kafka_client::call(node.addr(), &find, 4, TIMEOUT)?.coordinators[0].error_code != 0 {
        ensure!(Instant::now() < deadline, "no coordinator for {GROUP}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let deadline = Instant::now() + TIMEOUT;
    while let Err(e) = commit_all(&node, 0) {
        ensure!(Instant::now() < deadline, "the first commit never succeeded: {e:#}");
        std::thread::sleep(Duration::from_millis(50));
    }

    let started = Instant::now();
    let mut commits = 0i64;
    let mut largest = 0;
    while started.elapsed() < Duration::from_secs(60) {
        commits += 1;
        commit_all(&node, commits)?;
        if commits % 100 == 0 {
            largest = largest.max(offsets_topic_bytes(node.data_dir())?);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let written = offsets_topic_bytes(node.data_dir())?;
    // Each commit appends a batch of 12 records of roughly 70 bytes each.
    let appended_estimate = commits as u64 * PARTITIONS as u64 * 70;
    println!(
        "{commits} commits, about {} KB appended; __consumer_offsets holds {} KB (largest seen {} KB)",
        appended_estimate / 1024,
        written / 1024,
        largest / 1024
    );
    ensure!(
        commits > 2_000,
        "only {commits} commits in a minute: the test did not exercise the cleaner"
    );
    ensure!(
        largest < 16 * SEGMENT_BYTES,
        "__consumer_offsets grew to {largest} bytes after {commits} commits (about {appended_estimate} bytes appended): it is not being compacted"
    );
    ensure!(
        committed(&node)? == vec![commits; PARTITIONS as usize],
        "after cleaning, OffsetFetch must return the last commit"
    );
    node.restart()?;
    let deadline = Instant::now() + TIMEOUT;
    loop {
        match committed(&node) {
            Ok(offsets) => {
                ensure!(
                    offsets == vec![commits; PARTITIONS as usize],
                    "after a restart the compacted log loads the last commit: {offsets:?}"
                );
                break;
            }
            Err(e) => ensure!(Instant::now() < deadline, "offsets never loaded after restart: {e:#}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    node.assert_running()
}
