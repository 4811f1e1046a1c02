//! Transactions through the coordinator and the partitions: a committed transaction becomes
//! visible to read_committed consumers even when its coordinator is killed right after the
//! commit was acknowledged, an abandoned one is aborted at its timeout so the last stable
//! offset moves on, and requests from strangers or stale producers change nothing.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::describe_producers_request::TopicRequest as ProducersTopic;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::write_txn_markers_request::{WritableTxnMarker, WritableTxnMarkerTopic};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, ApiVersionsRequest, DescribeProducersRequest, EndTxnRequest,
    FindCoordinatorRequest, GroupId, InitProducerIdRequest, ListOffsetsRequest, ProduceRequest, ProducerId, TopicName,
    TransactionalId, TxnOffsetCommitRequest, WriteTxnMarkersRequest,
};
use kafka_protocol::protocol::StrBytes;
use rdkafka::consumer::BaseConsumer;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Message, Offset};
use sluice_integration_tests::clients::{self, wait_until};
use sluice_integration_tests::security::{SaslLogin, SaslMechanism};
use sluice_integration_tests::{kafka_client, ClientSecurity, Cluster, NodeOptions, SluiceNode};
use sluice_protocol::batch::test_support::encode_simple_batch;

const TIMEOUT: Duration = Duration::from_secs(10);
const TRANSACTION_KEY: i8 = 1;

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// One request on a fresh connection, logged in as `who` says (plaintext when default).
fn call<R: kafka_protocol::protocol::Request>(
    addr: SocketAddr,
    who: &ClientSecurity,
    request: &R,
    version: i16,
) -> Result<R::Response> {
    kafka_client::call_secured(addr, who, request, version, TIMEOUT)
}

fn plain() -> ClientSecurity {
    ClientSecurity::default()
}

/// A 3-record transactional batch from producer `pid`/`epoch` at sequence `seq`.
fn transactional_batch(pid: i64, epoch: i16, seq: i32) -> Bytes {
    let mut batch = encode_simple_batch(3, 50, 1_700_000_000_000);
    batch[21..23].copy_from_slice(&0x10i16.to_be_bytes());
    batch[43..51].copy_from_slice(&pid.to_be_bytes());
    batch[51..53].copy_from_slice(&epoch.to_be_bytes());
    batch[53..57].copy_from_slice(&seq.to_be_bytes());
    let crc = crc32c::crc32c(&batch[21..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(batch)
}

fn produce(addr: SocketAddr, id: &str, topic: &str, batch: Bytes) -> Result<i16> {
    produce_as(addr, &plain(), id, topic, batch)
}

fn produce_as(addr: SocketAddr, who: &ClientSecurity, id: &str, topic: &str, batch: Bytes) -> Result<i16> {
    produce_with(addr, who, id, topic, batch, 9)
}

/// Produce of `batch` to partition 0 of `topic` at `version`: the partition's error code.
fn produce_with(
    addr: SocketAddr,
    who: &ClientSecurity,
    id: &str,
    topic: &str,
    batch: Bytes,
    version: i16,
) -> Result<i16> {
    let data = PartitionProduceData::default().with_index(0).with_records(Some(batch));
    let request = ProduceRequest::default()
        .with_transactional_id(Some(TransactionalId(str_bytes(id))))
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(str_bytes(topic)))
            .with_partition_data(vec![data])]);
    let response = call(addr, who, &request, version)?;
    Ok(response.responses[0].partition_responses[0].error_code)
}

/// ListOffsets latest of partition 0 at `isolation` (0: the high watermark, 1: the LSO).
fn latest(addr: SocketAddr, topic: &str, isolation: i8) -> Result<i64> {
    latest_as(addr, &plain(), topic, isolation)
}

fn latest_as(addr: SocketAddr, who: &ClientSecurity, topic: &str, isolation: i8) -> Result<i64> {
    let request = ListOffsetsRequest::default()
        .with_replica_id((-1).into())
        .with_isolation_level(isolation)
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(TopicName(str_bytes(topic)))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(-1)])]);
    let response = call(addr, who, &request, 7)?;
    let p = &response.topics[0].partitions[0];
    ensure!(p.error_code == 0, "ListOffsets: {p:?}");
    Ok(p.offset)
}

/// The broker coordinating `id` (creating `__transaction_state` on first use).
fn coordinator(addr: SocketAddr, id: &str) -> Result<i32> {
    coordinator_as(addr, &plain(), id)
}

fn coordinator_as(addr: SocketAddr, who: &ClientSecurity, id: &str) -> Result<i32> {
    wait_until(Duration::from_secs(30), "a transaction coordinator", || {
        let c = find_coordinator(addr, who, id).ok()?;
        (c.0 == 0).then_some(c.1)
    })
}

/// FindCoordinator for a transactional id: (error code, node id).
fn find_coordinator(addr: SocketAddr, who: &ClientSecurity, id: &str) -> Result<(i16, i32)> {
    let request = FindCoordinatorRequest::default()
        .with_key_type(TRANSACTION_KEY)
        .with_coordinator_keys(vec![str_bytes(id)]);
    let response = call(addr, who, &request, 4)?;
    let c = response.coordinators.first().context("no coordinator answer")?;
    Ok((c.error_code, c.node_id.0))
}

/// InitProducerId for `id` at the coordinator, retried while it loads or completes a fence.
fn init_producer(addr: SocketAddr, id: &str, timeout_ms: i32) -> Result<(i64, i16)> {
    init_producer_as(addr, &plain(), id, timeout_ms)
}

fn init_producer_as(addr: SocketAddr, who: &ClientSecurity, id: &str, timeout_ms: i32) -> Result<(i64, i16)> {
    wait_until(Duration::from_secs(30), "InitProducerId", || {
        let (code, pid, epoch) = try_init_producer(addr, who, id, timeout_ms).ok()?;
        (code == 0).then_some((pid, epoch))
    })
}

/// One InitProducerId: (error code, producer id, epoch).
fn try_init_producer(addr: SocketAddr, who: &ClientSecurity, id: &str, timeout_ms: i32) -> Result<(i16, i64, i16)> {
    let request = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(str_bytes(id))))
        .with_transaction_timeout_ms(timeout_ms)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let r = call(addr, who, &request, 4)?;
    Ok((r.error_code, r.producer_id.0, r.producer_epoch))
}

fn add_partition(addr: SocketAddr, id: &str, pid: i64, epoch: i16, topic: &str) -> Result<i16> {
    add_partition_as(addr, &plain(), id, pid, epoch, topic)
}

fn add_partition_as(
    addr: SocketAddr,
    who: &ClientSecurity,
    id: &str,
    pid: i64,
    epoch: i16,
    topic: &str,
) -> Result<i16> {
    let request = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(TransactionalId(str_bytes(id)))
        .with_v3_and_below_producer_id(ProducerId(pid))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
            .with_name(TopicName(str_bytes(topic)))
            .with_partitions(vec![0])]);
    let response = call(addr, who, &request, 3)?;
    Ok(response.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)
}

fn end_txn(addr: SocketAddr, id: &str, pid: i64, epoch: i16, commit: bool) -> Result<i16> {
    end_txn_as(addr, &plain(), id, pid, epoch, commit)
}

fn end_txn_as(addr: SocketAddr, who: &ClientSecurity, id: &str, pid: i64, epoch: i16, commit: bool) -> Result<i16> {
    let request = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(str_bytes(id)))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_committed(commit);
    Ok(call(addr, who, &request, 3)?.error_code)
}

/// WriteTxnMarkers for partition 0 of `topic`: the partition's error code.
fn write_marker_as(
    addr: SocketAddr,
    who: &ClientSecurity,
    topic: &str,
    pid: i64,
    epoch: i16,
    commit: bool,
) -> Result<i16> {
    let request = WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_coordinator_epoch(0)
        .with_transaction_result(commit)
        .with_topics(vec![WritableTxnMarkerTopic::default()
            .with_name(TopicName(str_bytes(topic)))
            .with_partition_indexes(vec![0])])]);
    let answer = call(addr, who, &request, 1)?;
    Ok(answer.markers[0].topics[0].partitions[0].error_code)
}

fn code(e: ResponseError) -> i16 {
    e.code()
}

#[test]
fn strangers_and_stale_producers_cannot_end_or_mark_a_transaction() -> Result<()> {
    let node = SluiceNode::start(NodeOptions::default())?;
    let addr = node.addr();
    ensure!(kafka_client::create_topic(addr, "tx-hostile", 1, TIMEOUT)? == 0);
    coordinator(addr, "tx-h")?;
    let (pid, epoch) = init_producer(addr, "tx-h", 60_000)?;
    ensure!(add_partition(addr, "tx-h", pid, epoch, "tx-hostile")? == 0);
    ensure!(produce(addr, "tx-h", "tx-hostile", transactional_batch(pid, epoch, 0))? == 0);
    ensure!(
        latest(addr, "tx-hostile", 0)? == 3,
        "the records are below the high watermark"
    );
    ensure!(
        latest(addr, "tx-hostile", 1)? == 0,
        "the open transaction holds the LSO at its start"
    );

    // A stranger's producer id, and the right id at a stale epoch.
    ensure!(end_txn(addr, "tx-h", pid + 1, epoch, true)? == code(ResponseError::InvalidProducerIdMapping));
    ensure!(end_txn(addr, "tx-h", pid, epoch - 1, true)? == code(ResponseError::ProducerFenced));
    // A marker naming an older epoch than the producer's is refused by the partition.
    let error = write_marker_as(addr, &plain(), "tx-hostile", pid, epoch - 1, true)?;
    ensure!(
        error == code(ResponseError::InvalidProducerEpoch),
        "stale marker answered {error}"
    );
    ensure!(latest(addr, "tx-hostile", 0)? == 3, "no marker was appended");
    ensure!(latest(addr, "tx-hostile", 1)? == 0, "the transaction is still open");

    // The producer itself commits: the markers move the LSO past its records.
    ensure!(end_txn(addr, "tx-h", pid, epoch, true)? == 0);
    wait_until(TIMEOUT, "the LSO to pass the commit marker", || {
        latest(addr, "tx-hostile", 1).ok().filter(|lso| *lso == 4)
    })?;
    Ok(())
}

/// A read_committed consumer of every partition of `topic` from the start: the values it
/// reads once its position reaches `end` on every partition.
fn read_committed(bootstrap: &str, topic: &str, partitions: i32, expected: usize) -> Result<Vec<String>> {
    let consumer: BaseConsumer = clients::consumer_config(bootstrap)
        .set("isolation.level", "read_committed")
        .create()?;
    let all: Vec<i32> = (0..partitions).collect();
    clients::assign(&consumer, topic, &all, Offset::Beginning)?;
    let mut values = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while values.len() < expected && std::time::Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            values.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string());
        }
    }
    // Anything more that would arrive (an aborted record leaking) shows in a last poll round.
    let settle = std::time::Instant::now() + Duration::from_secs(2);
    while std::time::Instant::now() < settle {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            values.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string());
        }
    }
    Ok(values)
}

#[test]
fn a_commit_completes_and_an_abandoned_transaction_aborts_when_the_coordinator_is_killed() -> Result<()> {
    let mut cluster = Cluster::start(
        3,
        &[("transaction.abort.timed.out.transaction.cleanup.interval.ms", "500")],
    )?;
    let bootstrap = cluster.bootstrap();
    let addr = cluster.addr(1);
    // Every broker unfenced first, so `__transaction_state` gets three replicas per partition.
    wait_until(Duration::from_secs(30), "three unfenced brokers", || {
        cluster.listed_brokers(1).ok().filter(|ids| ids.len() == 3)
    })?;
    kafka_client::create_topic_on(addr, "tx-kill", &[&[1, 2, 3], &[2, 3, 1], &[3, 1, 2]])?;
    cluster.await_full_isr("tx-kill", Duration::from_secs(30))?;

    // An abandoned transaction (typed requests: it is never ended) with a short timeout.
    let abandoned_coordinator = coordinator(addr, "tx-abandoned")?;
    let (pid, epoch) = init_producer(cluster.addr(abandoned_coordinator), "tx-abandoned", 3_000)?;
    ensure!(
        add_partition(
            cluster.addr(abandoned_coordinator),
            "tx-abandoned",
            pid,
            epoch,
            "tx-kill"
        )? == 0
    );
    let leader = cluster.partition_leader(1, "tx-kill", 0, TIMEOUT)?;
    ensure!(
        produce(
            cluster.addr(leader),
            "tx-abandoned",
            "tx-kill",
            transactional_batch(pid, epoch, 0)
        )? == 0
    );

    // A producer commits two transactions; its coordinator is killed right after the second
    // commit is acknowledged (markers may not all be written yet).
    let producer: BaseProducer = clients::producer_config(&bootstrap)
        .set("transactional.id", "tx-committer")
        .set("enable.idempotence", "true")
        .create()?;
    producer.init_transactions(Duration::from_secs(30))?;
    let mut sent = Vec::new();
    for round in 0..2 {
        producer.begin_transaction()?;
        for i in 0..30 {
            let value = format!("committed-{round}-{i}");
            let partition = i % 3;
            producer
                .send(
                    BaseRecord::<(), str>::to("tx-kill")
                        .partition(partition)
                        .payload(&value),
                )
                .map_err(|(e, _)| e)?;
            sent.push(value);
        }
        producer.commit_transaction(Duration::from_secs(30))?;
    }
    let killed = coordinator(addr, "tx-committer")?;
    cluster.node(killed).kill()?;
    let survivor = cluster
        .ids()
        .into_iter()
        .find(|id| *id != killed)
        .context("a survivor")?;
    let bootstrap = cluster.addr(survivor).to_string();

    let read = read_committed(&bootstrap, "tx-kill", 3, sent.len())?;
    let expected: HashSet<&String> = sent.iter().collect();
    let got: HashSet<&String> = read.iter().collect();
    ensure!(
        read.len() == sent.len() && got == expected,
        "read_committed read {} records ({} distinct), expected the {} committed ones; extra: {:?}",
        read.len(),
        got.len(),
        sent.len(),
        got.difference(&expected).take(5).collect::<Vec<_>>()
    );
    ensure!(
        !read.iter().any(|v| v.starts_with('v')),
        "a record of the aborted transaction was read"
    );
    // The abandoned transaction was aborted: the LSO reaches the high watermark.
    let leader = cluster.partition_leader(survivor, "tx-kill", 0, TIMEOUT)?;
    wait_until(
        Duration::from_secs(60),
        "the abandoned transaction to be aborted",
        || {
            let hw = latest(cluster.addr(leader), "tx-kill", 0).ok()?;
            let lso = latest(cluster.addr(leader), "tx-kill", 1).ok()?;
            (lso == hw).then_some(())
        },
    )?;
    Ok(())
}

/// KIP-890 part 1 on a partition led by broker 1, for a producer whose coordinator is
/// `coordinator_node` (the leader itself, or another broker asked with AddPartitionsToTxn v4):
/// a write to a partition never added is refused and stored nowhere, an added one is
/// accepted, and a late write after the transaction's abort cannot open a new transaction
/// that would hold the last stable offset forever.
fn verification_refuses_unknown_transactions(cluster: &Cluster, id: &str, topic: &str) -> Result<()> {
    let leader = cluster.addr(1);
    let coordinator_addr = cluster.addr(coordinator(leader, id)?);
    let (pid, epoch) = init_producer(coordinator_addr, id, 60_000)?;
    let hw_before = latest(leader, topic, 0)?;

    let error = produce(leader, id, topic, transactional_batch(pid, epoch, 0))?;
    ensure!(
        error == code(ResponseError::InvalidTxnState),
        "{id}: a write to a partition never added answered {error}"
    );
    ensure!(
        latest(leader, topic, 0)? == hw_before,
        "{id}: the refused write was stored"
    );

    ensure!(add_partition(coordinator_addr, id, pid, epoch, topic)? == 0);
    ensure!(
        produce(leader, id, topic, transactional_batch(pid, epoch, 0))? == 0,
        "{id}: the added partition refused the write"
    );
    ensure!(end_txn(coordinator_addr, id, pid, epoch, false)? == 0);
    let ended = hw_before + 4; // three records and the abort marker
    wait_until(TIMEOUT, "the abort marker", || {
        let lso = latest(leader, topic, 1).ok()?;
        (lso == ended).then_some(())
    })?;

    // The next batch of the same producer epoch, as a retry delayed past the abort would
    // arrive: the coordinator has no transaction with this partition.
    let error = produce(leader, id, topic, transactional_batch(pid, epoch, 3))?;
    ensure!(
        error == code(ResponseError::InvalidTxnState),
        "{id}: a late write answered {error}"
    );
    ensure!(latest(leader, topic, 0)? == ended, "{id}: the late write was stored");
    ensure!(
        latest(leader, topic, 1)? == ended,
        "{id}: the last stable offset is held by a hanging transaction"
    );
    Ok(())
}

#[test]
fn partition_leaders_verify_a_first_transactional_write_with_the_coordinator() -> Result<()> {
    let cluster = Cluster::start(3, &[])?;
    let addr = cluster.addr(1);
    wait_until(Duration::from_secs(30), "three unfenced brokers", || {
        cluster.listed_brokers(1).ok().filter(|ids| ids.len() == 3)
    })?;
    kafka_client::create_topic_on(addr, "tx-verify-remote", &[&[1, 2, 3]])?;
    kafka_client::create_topic_on(addr, "tx-verify-local", &[&[1, 2, 3]])?;
    cluster.await_full_isr("tx-verify-remote", Duration::from_secs(30))?;
    cluster.await_full_isr("tx-verify-local", Duration::from_secs(30))?;
    // One transactional id coordinated by the partition leader itself, one by another broker.
    let (mut local, mut remote) = (None, None);
    for i in 0..200 {
        let id = format!("tx-verify-{i}");
        match coordinator(addr, &id)? {
            1 => local = local.or(Some(id)),
            _ => remote = remote.or(Some(id)),
        }
        if local.is_some() && remote.is_some() {
            break;
        }
    }
    let remote = remote.context("an id coordinated by broker 2 or 3")?;
    let local = local.context("an id coordinated by broker 1")?;
    verification_refuses_unknown_transactions(&cluster, &remote, "tx-verify-remote")?;
    verification_refuses_unknown_transactions(&cluster, &local, "tx-verify-local")?;
    Ok(())
}

#[test]
fn the_next_transaction_added_right_after_a_commit_waits_for_its_markers_instead_of_being_refused() -> Result<()> {
    let cluster = Cluster::start(3, &[])?;
    wait_until(Duration::from_secs(30), "three unfenced brokers", || {
        cluster.listed_brokers(1).ok().filter(|ids| ids.len() == 3)
    })?;
    let topic = "tx-back-to-back";
    // Led by broker 2, and an id coordinated by broker 1: each commit's marker crosses the
    // network and is replicated before the transaction completes.
    kafka_client::create_topic_on(cluster.addr(1), topic, &[&[2, 3, 1]])?;
    cluster.await_full_isr(topic, Duration::from_secs(30))?;
    let id = (0..200)
        .map(|i| format!("tx-back-to-back-{i}"))
        .find(|id| coordinator(cluster.addr(1), id).ok() == Some(1))
        .context("an id coordinated by broker 1")?;
    let (coordinator_addr, leader) = (cluster.addr(1), cluster.addr(2));
    let (pid, epoch) = init_producer(coordinator_addr, &id, 60_000)?;
    const TRANSACTIONS: i32 = 10;
    for txn in 0..TRANSACTIONS {
        // Sent the moment the previous EndTxn is answered, while its marker is being written:
        // Kafka answers CONCURRENT_TRANSACTIONS and the client retries; Sluice holds the add
        // until the transaction has completed.
        let added = add_partition(coordinator_addr, &id, pid, epoch, topic)?;
        ensure!(
            added == 0,
            "transaction {txn}: AddPartitionsToTxn right after the previous commit answered {added}"
        );
        let written = produce(leader, &id, topic, transactional_batch(pid, epoch, txn * 3))?;
        ensure!(written == 0, "transaction {txn}: the write answered {written}");
        let ended = end_txn(coordinator_addr, &id, pid, epoch, true)?;
        ensure!(ended == 0, "transaction {txn}: EndTxn answered {ended}");
    }
    // Three records and a commit marker per transaction, all committed.
    let end = i64::from(TRANSACTIONS) * 4;
    wait_until(TIMEOUT, "every transaction's marker", || {
        (latest(leader, topic, 1).ok()? == end).then_some(())
    })?;
    Ok(())
}

/// TxnOffsetCommit of offset 5 on partition 0 of `topic` for `group` (no member named): the
/// partition's error code.
fn txn_offset_commit(addr: SocketAddr, id: &str, group: &str, pid: i64, epoch: i16, topic: &str) -> Result<i16> {
    let request = TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(str_bytes(id)))
        .with_group_id(GroupId(str_bytes(group)))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_generation_id(-1)
        .with_topics(vec![TxnOffsetCommitRequestTopic::default()
            .with_name(TopicName(str_bytes(topic)))
            .with_partitions(vec![TxnOffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(5)])]);
    let response = call(addr, &plain(), &request, 3)?;
    Ok(response.topics[0].partitions[0].error_code)
}

#[test]
fn a_transactional_offset_commit_outside_the_transaction_is_refused() -> Result<()> {
    let node = SluiceNode::start(NodeOptions::default())?;
    let addr = node.addr();
    ensure!(kafka_client::create_topic(addr, "tx-offsets", 1, TIMEOUT)? == 0);
    coordinator(addr, "tx-o")?;
    let (pid, epoch) = init_producer(addr, "tx-o", 60_000)?;
    // FindCoordinator for the group creates __consumer_offsets.
    let group_coordinator = FindCoordinatorRequest::default()
        .with_key_type(0)
        .with_coordinator_keys(vec![str_bytes("tx-o-group")]);
    wait_until(Duration::from_secs(30), "the group coordinator", || {
        let response = call(addr, &plain(), &group_coordinator, 4).ok()?;
        (response.coordinators.first()?.error_code == 0).then_some(())
    })?;
    // No AddOffsetsToTxn: a commit now (a late one, say) would stay pending forever.
    let error = wait_until(Duration::from_secs(30), "the offsets partition to load", || {
        let code = txn_offset_commit(addr, "tx-o", "tx-o-group", pid, epoch, "tx-offsets").ok()?;
        (code != ResponseError::CoordinatorLoadInProgress.code()).then_some(code)
    })?;
    ensure!(
        error == code(ResponseError::InvalidTxnState),
        "a commit outside the transaction answered {error}"
    );
    let request = AddOffsetsToTxnRequest::default()
        .with_transactional_id(TransactionalId(str_bytes("tx-o")))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_group_id(GroupId(str_bytes("tx-o-group")));
    ensure!(call(addr, &plain(), &request, 3)?.error_code == 0);
    // The refusal above can come before the offsets partition has loaded (the transaction is
    // checked first), so this commit may still be told to retry, as a client would.
    let committed = wait_until(Duration::from_secs(30), "the offsets partition to load", || {
        let code = txn_offset_commit(addr, "tx-o", "tx-o-group", pid, epoch, "tx-offsets").ok()?;
        (code != ResponseError::CoordinatorLoadInProgress.code()).then_some(code)
    })?;
    ensure!(committed == 0, "a commit inside the transaction answered {committed}");
    ensure!(end_txn(addr, "tx-o", pid, epoch, true)? == 0);
    Ok(())
}

/// The producer ids DescribeProducers lists for partition 0 of `topic`.
fn listed_producers(addr: SocketAddr, topic: &str) -> Result<Vec<i64>> {
    let request = DescribeProducersRequest::default().with_topics(vec![ProducersTopic::default()
        .with_name(TopicName(str_bytes(topic)))
        .with_partition_indexes(vec![0])]);
    let response = call(addr, &plain(), &request, 0)?;
    let p = &response.topics[0].partitions[0];
    ensure!(p.error_code == 0, "DescribeProducers: {p:?}");
    Ok(p.active_producers.iter().map(|a| a.producer_id.0).collect())
}

#[test]
fn idle_producers_expire_but_not_while_their_transaction_is_open() -> Result<()> {
    let node = SluiceNode::start(NodeOptions {
        settings: vec![
            ("producer.id.expiration.ms".into(), "1000".into()),
            ("producer.id.expiration.check.interval.ms".into(), "100".into()),
        ],
        ..NodeOptions::default()
    })?;
    let addr = node.addr();
    ensure!(kafka_client::create_topic(addr, "tx-expire", 1, TIMEOUT)? == 0);
    coordinator(addr, "tx-e")?;
    let (pid, epoch) = init_producer(addr, "tx-e", 60_000)?;
    ensure!(add_partition(addr, "tx-e", pid, epoch, "tx-expire")? == 0);
    // The batch's timestamp is from 2023: by it alone the producer is long expired.
    ensure!(produce(addr, "tx-e", "tx-expire", transactional_batch(pid, epoch, 0))? == 0);
    let watched = std::time::Instant::now() + Duration::from_millis(2_500);
    while std::time::Instant::now() < watched {
        ensure!(
            listed_producers(addr, "tx-expire")? == vec![pid],
            "a producer with an open transaction was forgotten"
        );
    }
    ensure!(end_txn(addr, "tx-e", pid, epoch, true)? == 0);
    // The marker is the producer's last write: it is forgotten a second after it.
    wait_until(Duration::from_secs(10), "the idle producer to expire", || {
        listed_producers(addr, "tx-expire").ok().filter(Vec::is_empty)
    })?;
    ensure!(
        latest(addr, "tx-expire", 1)? == 4,
        "the committed transaction is still there"
    );
    Ok(())
}

const AUTHORIZER: &str = "org.apache.kafka.metadata.authorizer.StandardAuthorizer";

fn user(name: &str) -> ClientSecurity {
    ClientSecurity::default().sasl(SaslLogin::new(
        SaslMechanism::ScramSha512,
        name,
        &format!("{name}-secret"),
    ))
}

/// Allows `User:alice` `operation` (Kafka's code) on a transactional id, as the admin.
fn allow_alice_on_transactional_id(addr: SocketAddr, admin: &ClientSecurity, id: &str, operation: i8) -> Result<()> {
    use kafka_protocol::messages::create_acls_request::AclCreation;
    use kafka_protocol::messages::CreateAclsRequest;
    const TRANSACTIONAL_ID_RESOURCE: i8 = 5;
    const LITERAL: i8 = 3;
    const ALLOW: i8 = 3;
    let request = CreateAclsRequest::default().with_creations(vec![AclCreation::default()
        .with_resource_type(TRANSACTIONAL_ID_RESOURCE)
        .with_resource_name(str_bytes(id))
        .with_resource_pattern_type(LITERAL)
        .with_principal(str_bytes("User:alice"))
        .with_host(str_bytes("*"))
        .with_operation(operation)
        .with_permission_type(ALLOW)]);
    let response = call(addr, admin, &request, 3)?;
    let code = response.results.first().context("no CreateAcls result")?.error_code;
    ensure!(code == 0, "CreateAcls: error code {code}");
    Ok(())
}

/// A node with SCRAM logins for `admin` (a super user) and `alice`, and ACLs enforced.
fn start_with_admin_and_alice(admin: &ClientSecurity) -> Result<SluiceNode> {
    let mut opts = NodeOptions::default()
        .set("listener.security.protocol.map", "PLAINTEXT:SASL_PLAINTEXT")
        .set("sasl.enabled.mechanisms", "SCRAM-SHA-512")
        .set("authorizer.class.name", AUTHORIZER)
        .set("super.users", "User:admin")
        .client_security(admin.clone());
    opts.extra_args = ["admin", "alice"]
        .iter()
        .flat_map(|u| {
            [
                "--add-scram".to_string(),
                format!("SCRAM-SHA-512=[name={u},password={u}-secret]"),
            ]
        })
        .collect();
    SluiceNode::start(opts)
}

/// UpdateFeatures v1 finalizing `transaction.version` at `level` as a downgrade, as `who`:
/// the top-level error code and the feature's.
fn update_transaction_version_as(addr: SocketAddr, who: &ClientSecurity, level: i16) -> Result<(i16, i16)> {
    use kafka_protocol::messages::update_features_request::FeatureUpdateKey;
    const SAFE_DOWNGRADE: i8 = 2;
    let request = kafka_protocol::messages::UpdateFeaturesRequest::default()
        .with_timeout_ms(30_000)
        .with_feature_updates(vec![FeatureUpdateKey::default()
            .with_feature(str_bytes("transaction.version"))
            .with_max_version_level(level)
            .with_upgrade_type(SAFE_DOWNGRADE)]);
    let response = call(addr, who, &request, 1)?;
    let feature = response.results.first().map_or(-1, |r| r.error_code);
    Ok((response.error_code, feature))
}

#[test]
fn without_alter_on_the_cluster_a_user_cannot_change_the_transaction_version() -> Result<()> {
    let admin = user("admin");
    let alice = user("alice");
    let node = start_with_admin_and_alice(&admin)?;
    let addr = node.addr();
    let denied = code(ResponseError::ClusterAuthorizationFailed);
    let refused = update_transaction_version_as(addr, &alice, 1)?;
    ensure!(refused == (denied, denied), "alice's UpdateFeatures: {refused:?}");
    let finalized = |who: &ClientSecurity| -> Result<Vec<(String, i16)>> {
        let versions = call(addr, who, &ApiVersionsRequest::default(), 3)?;
        Ok(versions
            .finalized_features
            .iter()
            .filter(|f| f.name.as_str() == "transaction.version")
            .map(|f| (f.name.to_string(), f.max_version_level))
            .collect())
    };
    ensure!(
        finalized(&admin)? == vec![("transaction.version".to_string(), 2)],
        "a refused update changed the level: {:?}",
        finalized(&admin)?
    );
    ensure!(update_transaction_version_as(addr, &admin, 1)? == (0, 0));
    ensure!(finalized(&admin)? == vec![("transaction.version".to_string(), 1)]);
    Ok(())
}

#[test]
fn without_acls_a_user_can_neither_join_end_nor_mark_anothers_transaction() -> Result<()> {
    const WRITE: i8 = 4;
    let admin = user("admin");
    let alice = user("alice");
    let node = start_with_admin_and_alice(&admin)?;
    let addr = node.addr();
    ensure!(kafka_client::create_topic_secured(addr, &admin, "guarded-tx", 1, TIMEOUT)? == 0);
    coordinator_as(addr, &admin, "tx-owned")?;
    let (pid, epoch) = init_producer_as(addr, &admin, "tx-owned", 60_000)?;
    ensure!(add_partition_as(addr, &admin, "tx-owned", pid, epoch, "guarded-tx")? == 0);
    ensure!(
        produce_as(
            addr,
            &admin,
            "tx-owned",
            "guarded-tx",
            transactional_batch(pid, epoch, 0)
        )? == 0
    );
    let denied = code(ResponseError::TransactionalIdAuthorizationFailed);

    // Alice, with no ACLs, knowing the producer id and epoch, is refused everywhere.
    ensure!(find_coordinator(addr, &alice, "tx-owned")?.0 == denied);
    ensure!(
        try_init_producer(addr, &alice, "tx-owned", 60_000)?.0 == denied,
        "no fencing without WRITE"
    );
    ensure!(add_partition_as(addr, &alice, "tx-owned", pid, epoch, "guarded-tx")? == denied);
    ensure!(end_txn_as(addr, &alice, "tx-owned", pid, epoch, false)? == denied);
    ensure!(
        produce_as(
            addr,
            &alice,
            "tx-owned",
            "guarded-tx",
            transactional_batch(pid, epoch, 1)
        )? == denied
    );
    let marker = write_marker_as(addr, &alice, "guarded-tx", pid, epoch, false)?;
    ensure!(
        marker == code(ResponseError::ClusterAuthorizationFailed),
        "marker answered {marker}"
    );
    ensure!(latest_as(addr, &admin, "guarded-tx", 0)? == 3, "nothing was appended");
    ensure!(
        latest_as(addr, &admin, "guarded-tx", 1)? == 0,
        "the transaction is still open"
    );

    // WRITE on the transactional id lets her take it over (fencing the admin's producer), but
    // markers stay the brokers' alone.
    allow_alice_on_transactional_id(addr, &admin, "tx-owned", WRITE)?;
    let marker = write_marker_as(addr, &alice, "guarded-tx", pid, epoch, false)?;
    ensure!(
        marker == code(ResponseError::ClusterAuthorizationFailed),
        "marker answered {marker}"
    );
    let (new_pid, new_epoch) = init_producer_as(addr, &alice, "tx-owned", 60_000)?;
    ensure!(
        new_pid == pid && new_epoch > epoch,
        "a new epoch fences the old producer"
    );
    ensure!(end_txn_as(addr, &admin, "tx-owned", pid, epoch, true)? == code(ResponseError::ProducerFenced));
    wait_until(TIMEOUT, "the fenced transaction's abort marker", || {
        (latest_as(addr, &admin, "guarded-tx", 1).ok()? == 4).then_some(())
    })?;
    Ok(())
}

fn produce_at(addr: SocketAddr, id: &str, topic: &str, batch: Bytes, version: i16) -> Result<i16> {
    produce_with(addr, &plain(), id, topic, batch, version)
}

/// EndTxn v5 (transactions v2): the error code and the producer id and epoch answered.
fn end_txn_v2(addr: SocketAddr, id: &str, pid: i64, epoch: i16, commit: bool) -> Result<(i16, i64, i16)> {
    let request = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(str_bytes(id)))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_committed(commit);
    let response = call(addr, &plain(), &request, 5)?;
    Ok((response.error_code, response.producer_id.0, response.producer_epoch))
}

/// The `transaction.version` level ApiVersions v3 reports as finalized (0 when not listed).
fn finalized_transaction_version(addr: SocketAddr) -> Result<i16> {
    let response = call(addr, &plain(), &ApiVersionsRequest::default(), 3)?;
    ensure!(response.error_code == 0, "ApiVersions: {}", response.error_code);
    Ok(response
        .finalized_features
        .iter()
        .find(|f| f.name.as_str() == "transaction.version")
        .map_or(0, |f| f.max_version_level))
}

#[test]
fn transactions_v2_producers_write_without_adding_partitions_and_every_end_bumps_the_epoch() -> Result<()> {
    let cluster = Cluster::start(3, &[])?;
    let leader = cluster.addr(1);
    wait_until(Duration::from_secs(30), "three unfenced brokers", || {
        cluster.listed_brokers(1).ok().filter(|ids| ids.len() == 3)
    })?;
    ensure!(
        finalized_transaction_version(leader)? == 2,
        "transaction.version 2 is not finalized"
    );
    kafka_client::create_topic_on(leader, "tv2", &[&[1, 2, 3]])?;
    cluster.await_full_isr("tv2", Duration::from_secs(30))?;
    // An id coordinated by another broker: the leader adds the partition with AddPartitionsToTxn v5.
    let mut remote = None;
    for i in 0..200 {
        let id = format!("tv2-{i}");
        let at = coordinator(leader, &id)?;
        if at != 1 {
            remote = Some((id, at));
            break;
        }
    }
    let (id, at) = remote.context("an id coordinated by broker 2 or 3")?;
    let id = id.as_str();
    let coordinator_addr = cluster.addr(at);
    let (pid, epoch) = init_producer(coordinator_addr, id, 60_000)?;

    // Produce v12 with no AddPartitionsToTxn first: the leader has the coordinator add it.
    ensure!(produce_at(leader, id, "tv2", transactional_batch(pid, epoch, 0), 12)? == 0);
    ensure!(
        latest(leader, "tv2", 1)? == 0,
        "the open transaction holds the last stable offset"
    );
    let committed = end_txn_v2(coordinator_addr, id, pid, epoch, true)?;
    ensure!(
        committed == (0, pid, epoch + 1),
        "EndTxn v5 commit answered {committed:?}"
    );
    wait_until(TIMEOUT, "the commit marker", || {
        (latest(leader, "tv2", 1).ok()? == 4).then_some(())
    })?;
    // A retry (the old epoch) gets the same answer once the commit is complete (before that,
    // CONCURRENT_TRANSACTIONS, which clients retry) and writes nothing more.
    let not_busy = |epoch: i16, commit: bool| {
        wait_until(TIMEOUT, "the previous transaction to complete", || {
            let answer = end_txn_v2(coordinator_addr, id, pid, epoch, commit).ok()?;
            (answer.0 != code(ResponseError::ConcurrentTransactions)).then_some(answer)
        })
    };
    let retried = not_busy(epoch, true)?;
    ensure!(retried == (0, pid, epoch + 1), "a retried EndTxn answered {retried:?}");

    // The marker carries the bumped epoch: a late write of the finished transaction is fenced.
    let late = produce_at(leader, id, "tv2", transactional_batch(pid, epoch, 3), 12)?;
    ensure!(
        late == code(ResponseError::InvalidProducerEpoch),
        "a late write at the old epoch answered {late}"
    );
    // The next transaction writes at the new epoch from sequence 0 and aborts.
    ensure!(produce_at(leader, id, "tv2", transactional_batch(pid, epoch + 1, 0), 12)? == 0);
    ensure!(end_txn_v2(coordinator_addr, id, pid, epoch + 1, false)? == (0, pid, epoch + 2));
    wait_until(TIMEOUT, "the abort marker", || {
        (latest(leader, "tv2", 1).ok()? == 8).then_some(())
    })?;
    // Aborting a transaction that wrote nothing is accepted (the client cannot know whether its
    // sends arrived) and bumps the epoch; committing one is refused.
    ensure!(not_busy(epoch + 2, false)? == (0, pid, epoch + 3));
    let empty_commit = not_busy(epoch + 3, true)?;
    ensure!(
        empty_commit.0 == code(ResponseError::InvalidTxnState),
        "committing an empty transaction answered {empty_commit:?}"
    );
    ensure!(
        latest(leader, "tv2", 0)? == 8,
        "nothing was written for the empty transactions"
    );
    Ok(())
}

#[test]
fn with_transaction_version_0_clients_stay_on_v1_and_must_add_partitions_themselves() -> Result<()> {
    let node = SluiceNode::start(NodeOptions::default().set("transaction.version", "0"))?;
    let addr = node.addr();
    ensure!(
        finalized_transaction_version(addr)? == 0,
        "transaction.version is finalized above 0"
    );
    ensure!(kafka_client::create_topic(addr, "tv0", 1, TIMEOUT)? == 0);
    coordinator(addr, "tv0-a")?;
    let (pid, epoch) = init_producer(addr, "tv0-a", 60_000)?;
    let refused = produce_at(addr, "tv0-a", "tv0", transactional_batch(pid, epoch, 0), 12)?;
    ensure!(
        refused == code(ResponseError::InvalidTxnState),
        "a write to a partition never added answered {refused}"
    );
    ensure!(add_partition(addr, "tv0-a", pid, epoch, "tv0")? == 0);
    ensure!(produce_at(addr, "tv0-a", "tv0", transactional_batch(pid, epoch, 0), 12)? == 0);
    ensure!(end_txn(addr, "tv0-a", pid, epoch, true)? == 0);
    Ok(())
}
