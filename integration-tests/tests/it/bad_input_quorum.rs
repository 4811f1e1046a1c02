//! Bad input on the metadata quorum's port (the controller listener) of real `sluice` processes:
//! strangers, wrong secrets, oversized and stalled frames, and — with the cluster's real secret —
//! forged Raft messages. Each is refused (connection closed or message dropped, with a warning
//! in the node's log), the node keeps running, the quorum keeps a leader, and clients can still
//! produce and fetch. Also: a node whose quorum member stops exits instead of serving frozen
//! metadata.
//!
//! Raft ids are Kafka node ids + 1 (node id 0 is a valid Kafka id but not a Raft one).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use rdkafka::producer::FutureRecord;
use rdkafka::Offset;
use sluice_integration_tests::clients::{self, wait_until};
use sluice_integration_tests::{kafka_client, Cluster, NodeOptions, SluiceNode};
use sluice_raft_meta::eraftpb::{Message, MessageType};
use sluice_raft_meta::handshake::HandshakeError;
use sluice_raft_meta::{raft_id, ClusterSecret, PeerConnection};

/// Whether the peer closed `stream` within `within` (a node never writes unasked on the quorum
/// port, so any read result but a timeout means closed).
fn closed_within(stream: &mut TcpStream, within: Duration) -> Result<bool> {
    stream.set_read_timeout(Some(within))?;
    let mut buf = [0u8; 256];
    let deadline = Instant::now() + within;
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return Ok(true),
            Ok(_) => {} // a handshake answer; keep waiting for the close
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return Ok(false)
            }
            Err(_) => return Ok(true), // reset
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
    }
}

/// The cluster id every node reports in Metadata (it is public: it is in the quorum hello).
fn cluster_id(cluster: &Cluster) -> Result<String> {
    let metadata = kafka_client::metadata(cluster.addr(1))?;
    Ok(metadata.cluster_id.context("Metadata has no cluster id")?.to_string())
}

/// The quorum's leader and epoch (Raft term) as node `asking` describes them, once it has one
/// with all three voters.
fn quorum_leader(cluster: &Cluster, asking: i32) -> Result<(i32, i32)> {
    wait_until(Duration::from_secs(30), "a quorum leader with voters 1, 2, 3", || {
        let response = kafka_client::describe_quorum(cluster.addr(asking)).ok()?;
        let partition = response.topics.first()?.partitions.first()?;
        let mut voters: Vec<i32> = partition.current_voters.iter().map(|v| v.replica_id.0).collect();
        voters.sort();
        (partition.error_code == 0 && partition.leader_id.0 > 0 && voters == vec![1, 2, 3])
            .then_some((partition.leader_id.0, partition.leader_epoch))
    })
}

/// Waits until node `id`'s log contains `text`.
fn await_log_line(cluster: &mut Cluster, id: i32, text: &str) -> Result<()> {
    let node = cluster.node(id);
    wait_until(Duration::from_secs(15), &format!("node {id} to log {text:?}"), || {
        node.log_tail(5000).contains(text).then_some(())
    })
    .map_err(|e| e.context(node.log_tail(30)))
}

/// Every node still runs, the quorum has a leader, and a new topic takes records and serves
/// them back.
async fn cluster_still_serves(cluster: &mut Cluster, topic: &str) -> Result<()> {
    for id in cluster.ids() {
        cluster.node(id).assert_running()?;
    }
    quorum_leader(cluster, 1)?;
    let admin = clients::admin_client(&cluster.bootstrap())?;
    clients::create_topic(&admin, topic, 1, &[]).await?;
    let producer = clients::future_producer(&cluster.bootstrap())?;
    for i in 0..10i64 {
        let value = format!("{topic}-{i}");
        let record = FutureRecord::to(topic).partition(0).key("k").payload(value.as_bytes());
        let delivered = producer
            .send(record, Duration::from_secs(15))
            .await
            .map_err(|(e, _)| e)?;
        ensure!(delivered.offset == i, "record {i} got offset {}", delivered.offset);
    }
    let consumer = clients::stream_consumer(&cluster.bootstrap())?;
    clients::assign(&consumer, topic, &[0], Offset::Beginning)?;
    let got = clients::consume_exact(&consumer, &HashMap::from([(0, 10)]), Duration::from_secs(30)).await?;
    let values: Vec<String> = got[&0]
        .iter()
        .map(|c| String::from_utf8_lossy(c.value.as_deref().unwrap_or_default()).into_owned())
        .collect();
    let expected: Vec<String> = (0..10).map(|i| format!("{topic}-{i}")).collect();
    ensure!(values == expected, "fetched {values:?}");
    Ok(())
}

/// A hello as `handshake.rs` lays it out: magic, version 2, node id, cluster id, nonce.
fn hello_frame(node_id: u64, cluster_id: &str) -> Vec<u8> {
    let mut body = b"SLRQ".to_vec();
    body.extend_from_slice(&2u16.to_be_bytes());
    body.extend_from_slice(&node_id.to_be_bytes());
    body.extend_from_slice(&(cluster_id.len() as u16).to_be_bytes());
    body.extend_from_slice(cluster_id.as_bytes());
    body.extend_from_slice(&[0x5a; 32]);
    frame(&body)
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

fn connect(addr: SocketAddr) -> Result<TcpStream> {
    TcpStream::connect_timeout(&addr, Duration::from_secs(5)).with_context(|| format!("connect {addr}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strangers_wrong_secrets_and_bad_frames_on_the_quorum_port_are_disconnected_and_the_cluster_keeps_serving(
) -> Result<()> {
    let mut cluster = Cluster::start(3, &[])?;
    let cluster_id = cluster_id(&cluster)?;
    let (leader, _) = quorum_leader(&cluster, 1)?;
    let target = leader; // the controller: the node whose loss would hurt most
    let addr = cluster.controller_addr(target);
    let claimed = if target == 1 { 2 } else { 1 };

    // Random garbage: its first four bytes read as a length far above the handshake limit.
    let mut garbage = connect(addr)?;
    garbage.write_all(b"GET / HTTP/1.1\r\nHost: sluice\r\n\r\n\x00\xff\x13\x37 junk junk")?;
    ensure!(
        closed_within(&mut garbage, Duration::from_secs(3))?,
        "garbage connection stayed open"
    );

    // A 2 GiB length prefix, then silence: refused from the length alone, well before the
    // 5 s handshake timeout could be what closed it.
    let mut huge = connect(addr)?;
    let started = Instant::now();
    huge.write_all(&(2u32 << 30).to_be_bytes())?;
    ensure!(
        closed_within(&mut huge, Duration::from_secs(3))?,
        "2 GiB length prefix kept the connection open"
    );
    ensure!(
        started.elapsed() < Duration::from_secs(3),
        "closed only after {:?}",
        started.elapsed()
    );

    // Half a hello, then a stall: the handshake deadline ends it.
    let mut stalled = connect(addr)?;
    let hello = hello_frame(raft_id(claimed), &cluster_id);
    stalled.write_all(&hello[..hello.len() / 2])?;
    ensure!(
        closed_within(&mut stalled, Duration::from_secs(10))?,
        "half a hello kept the connection open"
    );

    // The right cluster id and a real node id, but not the secret: the node's challenge comes
    // back, our made-up proof does not pass, and the connection closes.
    let mut impostor = connect(addr)?;
    impostor.write_all(&hello_frame(raft_id(claimed), &cluster_id))?;
    let mut challenge = [0u8; 4 + 72];
    impostor.set_read_timeout(Some(Duration::from_secs(5)))?;
    impostor
        .read_exact(&mut challenge)
        .context("the node answers a well-formed hello")?;
    ensure!(
        challenge[..4] == 72u32.to_be_bytes(),
        "challenge frame header {:?}",
        &challenge[..4]
    );
    ensure!(
        challenge[4..12] == raft_id(target).to_be_bytes(),
        "challenge from the wrong node"
    );
    impostor.write_all(&frame(&[0x42; 32]))?;
    ensure!(
        closed_within(&mut impostor, Duration::from_secs(3))?,
        "a wrong proof kept the connection open"
    );
    await_log_line(
        &mut cluster,
        target,
        "failed to prove it knows the cluster secret; give every node the same secret",
    )?;

    // The same through the real handshake code with a wrong secret: it refuses the node too.
    let wrong = ClusterSecret::new(b"not-this-clusters-secret".to_vec())?;
    let refused = PeerConnection::connect(
        &addr.to_string(),
        raft_id(claimed),
        raft_id(target),
        &cluster_id,
        &wrong,
    )
    .await
    .err();
    ensure!(
        matches!(refused, Some(HandshakeError::BadProof { .. })),
        "wrong secret: {refused:?}"
    );

    // Authenticated, then half a frame and a stall: the frame deadline ends it.
    let secret = ClusterSecret::new(cluster.cluster_secret().as_bytes().to_vec())?;
    let mut half = PeerConnection::connect(
        &addr.to_string(),
        raft_id(claimed),
        raft_id(target),
        &cluster_id,
        &secret,
    )
    .await
    .context("the cluster's own secret authenticates")?;
    half.send_bytes(&[0, 0, 0, 200, 8, 1]).await?;
    ensure!(
        half.closed_within(Duration::from_secs(15)).await,
        "half a frame kept the connection open"
    );
    await_log_line(&mut cluster, target, "started a frame but did not finish it")?;

    cluster_still_serves(&mut cluster, "after-bad-connections").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_raft_messages_sent_with_the_right_secret_are_dropped_and_the_quorum_keeps_its_leader() -> Result<()> {
    let mut cluster = Cluster::start(3, &[])?;
    let cluster_id = cluster_id(&cluster)?;
    let (leader, epoch) = quorum_leader(&cluster, 1)?;
    let follower = cluster
        .ids()
        .into_iter()
        .find(|id| *id != leader)
        .context("a follower")?;
    let bystander = cluster
        .ids()
        .into_iter()
        .find(|id| *id != leader && *id != follower)
        .context("a third node")?;
    let secret = ClusterSecret::new(cluster.cluster_secret().as_bytes().to_vec())?;

    // Speak to the follower as its leader: authenticated, so the messages reach the driver.
    let addr = cluster.controller_addr(follower).to_string();
    let mut conn = PeerConnection::connect(&addr, raft_id(leader), raft_id(follower), &cluster_id, &secret).await?;
    let forged = |kind: MessageType, from: i32| {
        let mut m = Message::default();
        m.set_msg_type(kind);
        m.from = raft_id(from);
        m.to = raft_id(follower);
        m.term = epoch as u64;
        m
    };
    // A heartbeat whose commit index is far beyond the follower's log (raft-rs would panic:
    // "to_commit ... is out of range").
    let mut heartbeat = forged(MessageType::MsgHeartbeat, leader);
    heartbeat.commit = 1 << 40;
    conn.send(&heartbeat).await?;
    await_log_line(
        &mut cluster,
        follower,
        "its commit index 1099511627776 is beyond this node's log",
    )?;
    // An append after a missing index with term 0 and a huge commit (same panic).
    let mut append = forged(MessageType::MsgAppend, leader);
    append.index = 1 << 30;
    append.commit = 1 << 40;
    conn.send(&append).await?;
    await_log_line(&mut cluster, follower, "with term 0 but this node's log ends at")?;
    // A vote request claiming to come from the third node, at a much higher term.
    let mut vote = forged(MessageType::MsgRequestVote, bystander);
    vote.term = epoch as u64 + 100;
    vote.index = u64::MAX;
    vote.log_term = u64::MAX;
    conn.send(&vote).await?;
    await_log_line(
        &mut cluster,
        follower,
        &format!(
            // Logs name node ids, not the raft ids on the wire.
            "claims to come from node {bystander} but the connection authenticated as node {leader}"
        ),
    )?;
    // Dropped, not disconnected: the peer is authenticated, only its messages were bad.
    ensure!(
        !conn.closed_within(Duration::from_millis(200)).await,
        "forged messages closed the connection"
    );

    let (leader_after, epoch_after) = quorum_leader(&cluster, follower)?;
    ensure!(
        epoch_after < epoch + 100,
        "the forged vote's term {} reached raft: epoch now {epoch_after} (leader {leader_after})",
        epoch + 100
    );
    cluster_still_serves(&mut cluster, "after-forged-messages").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_quorum_member_stops_exits_with_an_error_instead_of_serving_frozen_metadata() -> Result<()> {
    let mut node = SluiceNode::start(NodeOptions::default())?;
    // The metadata log's directory vanishes under the running node: its next durable write
    // (the hard state of the next commit) fails and the quorum member stops.
    std::fs::remove_dir_all(node.data_dir().join("__cluster_metadata-0"))?;
    let _ = kafka_client::create_topic(node.addr(), "never-committed", 1, Duration::from_secs(5));
    let status = wait_until(Duration::from_secs(20), "the broker process to exit", || {
        node.exit_status().ok().flatten()
    })
    .map_err(|e| e.context(node.log_tail(30)))?;
    if status.success() || status.code().is_none() {
        bail!("expected a non-zero exit code, got {status}\n{}", node.log_tail(30));
    }
    let log = node.log_tail(200);
    ensure!(
        log.contains("the metadata quorum member stopped")
            && log.contains("this node exits instead of serving metadata"),
        "the exit is not explained in the log:\n{log}"
    );
    Ok(())
}
