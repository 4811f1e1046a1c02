//! Raft transport: TCP between the controller listeners of quorum members.
//!
//! Every frame is `len u32 (big-endian), payload`. A connection is one-directional: the dialer
//! first sends a handshake frame (magic, protocol version, its node id, the cluster id), then
//! protobuf-encoded `raft::eraftpb::Message`s. Replies travel on the receiver's own outbound
//! connection, so each peer pair uses two connections and no request/response matching.
//!
//! Raft tolerates message loss, which keeps this layer simple and bounded: every queue has a
//! fixed capacity and drops on overflow, a failed write drops the messages in flight, and the
//! driver reports such losses to raft-rs (`report_unreachable`, `report_snapshot`) so it
//! probes and retries instead of waiting.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use protobuf::Message as _;
use raft::eraftpb::{Message, MessageType};
use raft::SnapshotStatus;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// Largest frame accepted or sent. A Raft snapshot travels in one message, so this also bounds
/// the size of the metadata state.
pub(crate) const MAX_FRAME_BYTES: usize = 64 << 20;
/// Messages queued per peer while its connection is slow or down; beyond this they are dropped.
const OUTBOUND_QUEUE_MESSAGES: usize = 1024;
/// Messages written back-to-back before one flush.
const WRITE_BATCH_MESSAGES: usize = 64;
/// Concurrent inbound connections; quorum members need a handful, the rest are refused.
const MAX_INBOUND_CONNECTIONS: usize = 64;
const MAX_HANDSHAKE_BYTES: usize = 1024;
const HANDSHAKE_MAGIC: &[u8; 4] = b"SLRQ";
const PROTOCOL_VERSION: u16 = 1;
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// A peer that does not drain its socket for this long is treated as down.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
const RECONNECT_BACKOFF_MIN: Duration = Duration::from_millis(50);
const RECONNECT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Delivery problems the driver must report to raft-rs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TransportEvent {
    /// A message to this peer was lost; raft-rs should probe it instead of streaming.
    Unreachable(u64),
    /// A snapshot message was written to the peer (`Finish`) or lost (`Failure`).
    Snapshot(u64, SnapshotStatus),
}

/// Whether [`Transport::send`] queued the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SendOutcome {
    Queued,
    Dropped,
}

/// Owns the listener and one sender task per peer; dropped or shut down with the driver.
pub(crate) struct Transport {
    node_id: u64,
    cluster_id: Arc<str>,
    peers: HashMap<u64, PeerSender>,
    events: mpsc::Sender<TransportEvent>,
    tasks: JoinSet<()>,
}

struct PeerSender {
    addr: String,
    queue: mpsc::Sender<Message>,
}

impl Transport {
    /// Starts accepting connections on `listener`; inbound messages go to `inbound`
    /// (dropped when it is full), delivery problems to `events`.
    pub(crate) fn start(
        listener: TcpListener,
        node_id: u64,
        cluster_id: &str,
        inbound: mpsc::Sender<Message>,
        events: mpsc::Sender<TransportEvent>,
    ) -> Transport {
        let cluster_id: Arc<str> = Arc::from(cluster_id);
        let mut tasks = JoinSet::new();
        tasks.spawn(accept_loop(listener, node_id, cluster_id.clone(), inbound));
        Transport {
            node_id,
            cluster_id,
            peers: HashMap::new(),
            events,
            tasks,
        }
    }

    /// Queues `msg` for its recipient at `addr` without waiting. A peer's sender task (and
    /// connection) is created on first use and replaced if the peer's address changes.
    pub(crate) fn send(&mut self, msg: Message, addr: &str) -> SendOutcome {
        let to = msg.to;
        let stale = self
            .peers
            .get(&to)
            .is_some_and(|p| p.addr != addr || p.queue.is_closed());
        if stale {
            self.peers.remove(&to);
        }
        let peer = self.peers.entry(to).or_insert_with(|| {
            let (queue, rx) = mpsc::channel(OUTBOUND_QUEUE_MESSAGES);
            self.tasks.spawn(run_peer_sender(
                to,
                addr.to_owned(),
                self.node_id,
                self.cluster_id.clone(),
                rx,
                self.events.clone(),
            ));
            PeerSender {
                addr: addr.to_owned(),
                queue,
            }
        });
        match peer.queue.try_send(msg) {
            Ok(()) => SendOutcome::Queued,
            Err(_) => SendOutcome::Dropped,
        }
    }

    /// Reaps finished sender tasks (peers whose address changed).
    pub(crate) fn reap(&mut self) {
        while self.tasks.try_join_next().is_some() {}
    }

    /// Stops the listener and all connections; returns once the listening socket is closed, so
    /// the address can be bound again right away.
    pub(crate) async fn shutdown(mut self) {
        self.peers.clear();
        self.tasks.shutdown().await;
    }
}

/// Accepts inbound connections, each served by its own task (dropped with this task).
async fn accept_loop(listener: TcpListener, node_id: u64, cluster_id: Arc<str>, inbound: mpsc::Sender<Message>) {
    let slots = Arc::new(Semaphore::new(MAX_INBOUND_CONNECTIONS));
    let mut connections = JoinSet::new();
    loop {
        let (stream, remote) = match listener.accept().await {
            Ok(conn) => conn,
            Err(e) => {
                // Usually out of file descriptors: back off instead of spinning.
                tracing::warn!(error = %e, "accepting a controller connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        while connections.try_join_next().is_some() {}
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            tracing::warn!(%remote, limit = MAX_INBOUND_CONNECTIONS, "refusing controller connection: too many open");
            continue;
        };
        let cluster_id = cluster_id.clone();
        let inbound = inbound.clone();
        connections.spawn(async move {
            let _permit = permit;
            match serve_inbound(stream, node_id, &cluster_id, inbound).await {
                Ok(()) => tracing::debug!(%remote, "controller connection closed"),
                Err(e) => tracing::info!(%remote, error = %e, "closed controller connection"),
            }
        });
    }
}

/// Reads the handshake, then feeds decoded messages to the driver until the peer disconnects.
async fn serve_inbound(
    stream: TcpStream,
    node_id: u64,
    cluster_id: &str,
    inbound: mpsc::Sender<Message>,
) -> io::Result<()> {
    let _ = stream.set_nodelay(true);
    let mut reader = tokio::io::BufReader::new(stream);
    let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, read_frame(&mut reader, MAX_HANDSHAKE_BYTES))
        .await
        .map_err(|_| invalid("no handshake within 5 s"))??
        .ok_or_else(|| invalid("closed before the handshake"))?;
    let (peer_id, peer_cluster) = decode_handshake(&handshake)?;
    if peer_cluster != cluster_id {
        return Err(invalid(&format!(
            "node {peer_id} belongs to cluster {peer_cluster:?}, this node to {cluster_id:?}; check both nodes' cluster id and --voters"
        )));
    }
    tracing::debug!(peer_id, "controller connection established");
    while let Some(frame) = read_frame(&mut reader, MAX_FRAME_BYTES).await? {
        let msg = Message::parse_from_bytes(&frame)
            .map_err(|e| invalid(&format!("undecodable raft message from node {peer_id}: {e}")))?;
        if msg.from != peer_id || msg.to != node_id {
            return Err(invalid(&format!(
                "node {peer_id} sent a message from {} to {} on its connection to {node_id}",
                msg.from, msg.to
            )));
        }
        match inbound.try_send(msg) {
            Ok(()) => {}
            // The driver is behind; raft retransmits what matters.
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::debug!(peer_id, "dropping inbound raft message: driver queue full")
            }
            Err(mpsc::error::TrySendError::Closed(_)) => return Ok(()),
        }
    }
    Ok(())
}

/// Delivers queued messages to one peer, (re)connecting lazily with capped exponential backoff.
/// Messages that arrive while the peer is down or in backoff are dropped and reported.
async fn run_peer_sender(
    peer_id: u64,
    addr: String,
    node_id: u64,
    cluster_id: Arc<str>,
    mut queue: mpsc::Receiver<Message>,
    events: mpsc::Sender<TransportEvent>,
) {
    let mut conn: Option<BufWriter<TcpStream>> = None;
    let mut backoff = RECONNECT_BACKOFF_MIN;
    let mut retry_at = Instant::now();
    let mut warned = false;
    while let Some(first) = queue.recv().await {
        let mut batch = vec![first];
        while batch.len() < WRITE_BATCH_MESSAGES {
            match queue.try_recv() {
                Ok(m) => batch.push(m),
                Err(_) => break,
            }
        }
        if conn.is_none() {
            if Instant::now() >= retry_at {
                match connect(&addr, node_id, &cluster_id).await {
                    Ok(c) => {
                        tracing::info!(peer_id, %addr, "connected to quorum peer");
                        conn = Some(c);
                        backoff = RECONNECT_BACKOFF_MIN;
                        warned = false;
                    }
                    Err(e) => {
                        if !warned {
                            tracing::warn!(peer_id, %addr, error = %e, "cannot reach quorum peer; retrying");
                            warned = true;
                        }
                        retry_at = Instant::now() + backoff;
                        backoff = (backoff * 2).min(RECONNECT_BACKOFF_MAX);
                    }
                }
            }
            if conn.is_none() {
                report_lost(peer_id, &batch, &events);
                continue;
            }
        }
        let Some(writer) = conn.as_mut() else {
            continue;
        };
        match tokio::time::timeout(WRITE_TIMEOUT, write_batch(writer, &batch)).await {
            Ok(Ok(())) => report_snapshots_sent(peer_id, &batch, &events),
            Ok(Err(e)) => {
                tracing::warn!(peer_id, %addr, error = %e, "lost connection to quorum peer");
                conn = None;
                report_lost(peer_id, &batch, &events);
            }
            Err(_) => {
                tracing::warn!(peer_id, %addr, "quorum peer stopped reading; reconnecting");
                conn = None;
                report_lost(peer_id, &batch, &events);
            }
        }
    }
}

async fn connect(addr: &str, node_id: u64, cluster_id: &str) -> io::Result<BufWriter<TcpStream>> {
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
    let _ = stream.set_nodelay(true);
    let mut writer = BufWriter::new(stream);
    write_frame(&mut writer, &encode_handshake(node_id, cluster_id)).await?;
    writer.flush().await?;
    Ok(writer)
}

async fn write_batch(writer: &mut BufWriter<TcpStream>, batch: &[Message]) -> io::Result<()> {
    for msg in batch {
        let bytes = msg.write_to_bytes().map_err(io::Error::other)?;
        if bytes.len() > MAX_FRAME_BYTES {
            // Sending it would make the receiver drop the connection; skip just this message.
            tracing::error!(to = msg.to, bytes = bytes.len(), max = MAX_FRAME_BYTES, msg_type = ?msg.get_msg_type(), "raft message exceeds the frame limit; dropped");
            continue;
        }
        write_frame(writer, &bytes).await?;
    }
    writer.flush().await
}

fn report_lost(peer_id: u64, batch: &[Message], events: &mpsc::Sender<TransportEvent>) {
    // Best effort: if the driver's event queue is full it already knows the peer is in trouble.
    let _ = events.try_send(TransportEvent::Unreachable(peer_id));
    for msg in batch.iter().filter(|m| is_snapshot(m)) {
        let _ = events.try_send(TransportEvent::Snapshot(msg.to, SnapshotStatus::Failure));
    }
}

fn report_snapshots_sent(peer_id: u64, batch: &[Message], events: &mpsc::Sender<TransportEvent>) {
    for _ in batch.iter().filter(|m| is_snapshot(m)) {
        let _ = events.try_send(TransportEvent::Snapshot(peer_id, SnapshotStatus::Finish));
    }
}

pub(crate) fn is_snapshot(msg: &Message) -> bool {
    msg.get_msg_type() == MessageType::MsgSnapshot
}

fn encode_handshake(node_id: u64, cluster_id: &str) -> Vec<u8> {
    let mut buf = Vec::with_capacity(16 + cluster_id.len());
    buf.extend_from_slice(HANDSHAKE_MAGIC);
    buf.extend_from_slice(&PROTOCOL_VERSION.to_be_bytes());
    buf.extend_from_slice(&node_id.to_be_bytes());
    buf.extend_from_slice(&(cluster_id.len() as u16).to_be_bytes());
    buf.extend_from_slice(cluster_id.as_bytes());
    buf
}

/// Returns the dialer's node id and cluster id.
fn decode_handshake(frame: &[u8]) -> io::Result<(u64, String)> {
    let bad = || invalid("malformed handshake (not a Sluice quorum peer?)");
    if frame.get(0..4) != Some(HANDSHAKE_MAGIC.as_slice()) {
        return Err(bad());
    }
    let version = u16::from_be_bytes(frame.get(4..6).ok_or_else(bad)?.try_into().map_err(|_| bad())?);
    if version != PROTOCOL_VERSION {
        return Err(invalid(&format!(
            "peer speaks quorum protocol version {version}, this node {PROTOCOL_VERSION}; run matching Sluice versions"
        )));
    }
    let node_id = u64::from_be_bytes(frame.get(6..14).ok_or_else(bad)?.try_into().map_err(|_| bad())?);
    let len = u16::from_be_bytes(frame.get(14..16).ok_or_else(bad)?.try_into().map_err(|_| bad())?) as usize;
    let cluster = frame.get(16..16 + len).ok_or_else(bad)?;
    if frame.len() != 16 + len {
        return Err(bad());
    }
    let cluster = String::from_utf8(cluster.to_vec()).map_err(|_| bad())?;
    Ok((node_id, cluster))
}

async fn write_frame(w: &mut (impl AsyncWrite + Unpin), payload: &[u8]) -> io::Result<()> {
    w.write_all(&(payload.len() as u32).to_be_bytes()).await?;
    w.write_all(payload).await
}

/// Reads one frame; `None` on a clean end of stream between frames.
async fn read_frame(r: &mut (impl AsyncRead + Unpin), max: usize) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > max {
        return Err(invalid(&format!("frame of {len} bytes exceeds the {max}-byte limit")));
    }
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf).await?;
    Ok(Some(buf))
}

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshake_round_trips_and_rejects_garbage() {
        let frame = encode_handshake(3, "cluster-x");
        assert_eq!(decode_handshake(&frame).unwrap(), (3, "cluster-x".to_owned()));
        assert!(decode_handshake(b"GET / HTTP/1.1").is_err());
        assert!(decode_handshake(&frame[..frame.len() - 1]).is_err());
    }

    #[tokio::test]
    async fn oversized_frame_is_refused_before_allocating() {
        let mut bytes: &[u8] = &[0xff, 0xff, 0xff, 0xff];
        let err = read_frame(&mut bytes, MAX_FRAME_BYTES).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }

    #[tokio::test]
    async fn peer_with_other_cluster_id_is_disconnected() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (inbound_tx, mut inbound_rx) = mpsc::channel(8);
        let (events_tx, _events_rx) = mpsc::channel(8);
        let transport = Transport::start(listener, 1, "cluster-a", inbound_tx, events_tx);

        let mut conn = connect(&addr.to_string(), 2, "cluster-b").await.unwrap();
        let mut msg = Message::default();
        msg.from = 2;
        msg.to = 1;
        // The receiver closes the connection after the handshake; writes eventually fail and
        // nothing reaches the driver.
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut closed = false;
        while Instant::now() < deadline {
            if write_batch(&mut conn, std::slice::from_ref(&msg)).await.is_err() {
                closed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(closed, "connection from another cluster stayed open");
        assert!(inbound_rx.try_recv().is_err());
        transport.shutdown().await;
    }

    #[tokio::test]
    async fn messages_reach_the_peer_in_order() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (inbound_tx, mut inbound_rx) = mpsc::channel(64);
        let (events_tx, _events_rx) = mpsc::channel(8);
        let receiver = Transport::start(listener, 1, "c", inbound_tx, events_tx);

        let sender_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (tx2, _rx2) = mpsc::channel(8);
        let (ev2, _ev2_rx) = mpsc::channel(64);
        let mut sender = Transport::start(sender_listener, 2, "c", tx2, ev2);
        for i in 1..=10u64 {
            let mut msg = Message::default();
            msg.from = 2;
            msg.to = 1;
            msg.index = i;
            assert_eq!(sender.send(msg, &addr), SendOutcome::Queued);
        }
        for i in 1..=10u64 {
            let msg = tokio::time::timeout(Duration::from_secs(5), inbound_rx.recv())
                .await
                .expect("message within 5 s")
                .expect("channel open");
            assert_eq!(msg.index, i);
        }
        sender.shutdown().await;
        receiver.shutdown().await;
    }
}
