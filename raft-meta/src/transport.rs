//! Raft transport: TCP between the controller listeners of quorum members.
//!
//! Every frame is `len u32 (big-endian), payload`. A connection is one-directional: it starts
//! with the mutual authentication in `handshake.rs` (nothing else is read from a dialer that
//! has not proved it knows the cluster secret), then carries protobuf-encoded
//! `raft::eraftpb::Message`s from the dialer to the listener. Replies travel on the receiver's
//! own outbound connection, so each peer pair uses two connections and no request/response
//! matching. The listener tags each message with the authenticated peer id; the driver checks
//! every message against it (`validate.rs`) before raft-rs sees it.
//!
//! With [`QuorumTls`] every connection is TLS with certificates on both sides, before the
//! handshake: the dialer checks that the listener's certificate names the host its `voters`
//! entry gives, and the listener, once the handshake has told it who dialled, that the dialer's
//! certificate names that voter's host. A member can then neither be impersonated by a
//! certificate of another host nor read on the wire.
//!
//! Raft tolerates message loss, which keeps this layer simple and bounded: every queue has a
//! fixed capacity and drops on overflow, a failed write drops the messages in flight, and the
//! driver reports such losses to raft-rs (`report_unreachable`, `report_snapshot`) so it
//! probes and retries instead of waiting. A frame's length is checked before anything is
//! buffered for it, its buffer grows only as its bytes arrive, and a frame once started must
//! finish within [`FRAME_READ_TIMEOUT`].

use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use prost::Message as _;
use raft::eraftpb::{Message, MessageType};
use raft::SnapshotStatus;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::frame::{invalid, read_frame_rest, write_frame};
use crate::handshake::{self, ClusterSecret, HandshakeError};
use crate::{node_id_of, QuorumTls};

/// A connection's byte stream: TCP, or TLS over TCP.
pub(crate) trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// Largest frame accepted or sent. A Raft snapshot travels in one message, so this also bounds
/// the size of the metadata state.
pub(crate) const MAX_FRAME_BYTES: usize = 64 << 20;
/// Messages queued per peer while its connection is slow or down; beyond this they are dropped.
const OUTBOUND_QUEUE_MESSAGES: usize = 1024;
/// Messages written back-to-back before one flush.
const WRITE_BATCH_MESSAGES: usize = 64;
/// Concurrent inbound connections, authenticated or not; quorum members need a handful, the
/// rest are refused.
const MAX_INBOUND_CONNECTIONS: usize = 64;
/// The whole handshake (both round trips) must finish within this.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Once a frame's first byte has arrived, the rest must arrive within this. A sender gives up
/// on a batch after [`WRITE_TIMEOUT`], so a healthy peer always finishes sooner; a peer that
/// starts a frame and stalls is disconnected instead of holding a buffer and a slot forever.
pub(crate) const FRAME_READ_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// A peer that does not drain its socket for this long is treated as down.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
const RECONNECT_BACKOFF_MIN: Duration = Duration::from_millis(50);
const RECONNECT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// A message read from an authenticated connection, with the peer the handshake proved.
#[derive(Debug)]
pub(crate) struct Inbound {
    pub(crate) peer_id: u64,
    pub(crate) msg: Message,
}

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
    local: Arc<Local>,
    peers: HashMap<u64, PeerSender>,
    events: mpsc::Sender<TransportEvent>,
    tasks: JoinSet<()>,
}

/// What both directions need to know about this node.
struct Local {
    node_id: u64,
    cluster_id: String,
    /// `None` only on a lone voter, which has no peers to talk to.
    secret: Option<ClusterSecret>,
    tls: Option<QuorumTls>,
    /// Each voter's `host:port`, for pinning its certificate.
    voters: std::collections::BTreeMap<u64, String>,
}

struct PeerSender {
    addr: String,
    queue: mpsc::Sender<Message>,
}

impl Transport {
    /// Starts accepting connections on `listener`; inbound messages go to `inbound`
    /// (dropped when it is full), delivery problems to `events`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start(
        listener: TcpListener,
        node_id: u64,
        cluster_id: &str,
        secret: Option<ClusterSecret>,
        tls: Option<QuorumTls>,
        voters: std::collections::BTreeMap<u64, String>,
        inbound: mpsc::Sender<Inbound>,
        events: mpsc::Sender<TransportEvent>,
    ) -> Transport {
        let local = Arc::new(Local {
            node_id,
            cluster_id: cluster_id.to_owned(),
            secret,
            tls,
            voters,
        });
        let mut tasks = JoinSet::new();
        tasks.spawn(accept_loop(listener, local.clone(), inbound));
        Transport {
            local,
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
                self.local.clone(),
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
async fn accept_loop(listener: TcpListener, local: Arc<Local>, inbound: mpsc::Sender<Inbound>) {
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
        let local = local.clone();
        let inbound = inbound.clone();
        connections.spawn(async move {
            let _permit = permit;
            serve_inbound(stream, remote, &local, inbound).await;
        });
    }
}

/// Authenticates the dialer, then feeds its decoded messages to the driver until it
/// disconnects or breaks the framing.
async fn serve_inbound(stream: TcpStream, remote: std::net::SocketAddr, local: &Local, inbound: mpsc::Sender<Inbound>) {
    let _ = stream.set_nodelay(true);
    let (stream, peer_certificate): (Box<dyn Io>, Option<Vec<u8>>) = match &local.tls {
        None => (Box::new(stream), None),
        Some(tls) => {
            let acceptor = tokio_rustls::TlsAcceptor::from((tls.configs)().0);
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => {
                    let leaf = stream
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|c| c.first())
                        .map(|c| c.as_ref().to_vec());
                    (Box::new(stream), leaf)
                }
                Ok(Err(e)) => {
                    tracing::warn!(%remote, error = %e, "refused a controller connection: the TLS handshake failed (a quorum member must present a certificate the controller truststore trusts)");
                    return;
                }
                Err(_) => {
                    tracing::warn!(%remote, "refused a controller connection: no TLS handshake in time");
                    return;
                }
            }
        }
    };
    let mut stream = tokio::io::BufReader::new(stream);
    let accepted = tokio::time::timeout(
        HANDSHAKE_TIMEOUT,
        handshake::accept(&mut stream, local.node_id, &local.cluster_id, local.secret.as_ref()),
    )
    .await;
    let peer_id = match accepted {
        Ok(Ok(peer_id)) => peer_id,
        Ok(Err(e)) if e.is_misconfiguration() => {
            tracing::warn!(%remote, error = %e, "refused a controller connection");
            return;
        }
        Ok(Err(e)) => {
            tracing::info!(%remote, error = %e, "controller connection closed during the handshake");
            return;
        }
        Err(_) => {
            tracing::warn!(%remote, timeout = ?HANDSHAKE_TIMEOUT, "refused a controller connection: no complete handshake in time (not a Sluice quorum peer?)");
            return;
        }
    };
    if local.tls.is_some() {
        if let Err(why) = pin_to_voter(local, peer_id, peer_certificate.as_deref()) {
            tracing::warn!(%remote, peer = node_id_of(peer_id), "refused a controller connection: {why}");
            return;
        }
    }
    tracing::debug!(peer = node_id_of(peer_id), %remote, "controller connection authenticated");
    match forward_messages(&mut stream, peer_id, inbound, FRAME_READ_TIMEOUT).await {
        Ok(()) => tracing::debug!(peer = node_id_of(peer_id), %remote, "controller connection closed"),
        Err(e) => tracing::warn!(peer = node_id_of(peer_id), %remote, error = %e, "closed controller connection"),
    }
}

/// Reads frames until the peer disconnects; each frame, once started, must finish within
/// `frame_timeout`.
async fn forward_messages(
    stream: &mut (impl AsyncRead + Unpin),
    peer_id: u64,
    inbound: mpsc::Sender<Inbound>,
    frame_timeout: Duration,
) -> io::Result<()> {
    loop {
        // Between frames a peer may be idle; a frame once started must finish in time.
        let mut first = [0u8; 1];
        if stream.read(&mut first).await? == 0 {
            return Ok(());
        }
        let frame = tokio::time::timeout(frame_timeout, read_frame_rest(stream, first[0], MAX_FRAME_BYTES))
            .await
            .map_err(|_| {
                invalid(&format!(
                    "node {} started a frame but did not finish it within {frame_timeout:?}",
                    node_id_of(peer_id)
                ))
            })??;
        // Decoding from `Bytes` slices fields out of the frame instead of allocating from
        // lengths the peer wrote; prost refuses any length beyond the bytes left in the frame.
        let msg = Message::decode(bytes::Bytes::from(frame)).map_err(|e| {
            invalid(&format!(
                "undecodable raft message from node {}: {e}",
                node_id_of(peer_id)
            ))
        })?;
        match inbound.try_send(Inbound { peer_id, msg }) {
            Ok(()) => {}
            // The driver is behind; raft retransmits what matters.
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::debug!(
                    peer = node_id_of(peer_id),
                    "dropping inbound raft message: driver queue full"
                )
            }
            Err(mpsc::error::TrySendError::Closed(_)) => return Ok(()),
        }
    }
}

/// Delivers queued messages to one peer, (re)connecting lazily with capped exponential backoff.
/// Messages that arrive while the peer is down or in backoff are dropped and reported.
async fn run_peer_sender(
    peer_id: u64,
    addr: String,
    local: Arc<Local>,
    mut queue: mpsc::Receiver<Message>,
    events: mpsc::Sender<TransportEvent>,
) {
    let mut conn: Option<BufWriter<Box<dyn Io>>> = None;
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
                match connect(&addr, peer_id, &local).await {
                    Ok(c) => {
                        tracing::info!(peer = node_id_of(peer_id), %addr, "connected to quorum peer");
                        conn = Some(c);
                        backoff = RECONNECT_BACKOFF_MIN;
                        warned = false;
                    }
                    Err(e) => {
                        if !warned {
                            tracing::warn!(peer = node_id_of(peer_id), %addr, error = %e, "cannot reach quorum peer; retrying");
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
                tracing::warn!(peer = node_id_of(peer_id), %addr, error = %e, "lost connection to quorum peer");
                conn = None;
                report_lost(peer_id, &batch, &events);
            }
            Err(_) => {
                tracing::warn!(peer = node_id_of(peer_id), %addr, "quorum peer stopped reading; reconnecting");
                conn = None;
                report_lost(peer_id, &batch, &events);
            }
        }
    }
}

/// The host of a `host:port` voter address, as a TLS server name.
fn voter_host(addr: &str) -> Option<rustls::pki_types::ServerName<'static>> {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h).trim_matches(['[', ']']);
    rustls::pki_types::ServerName::try_from(host.to_string()).ok()
}

/// Whether a dialer's certificate names the host of its voter entry.
fn pin_to_voter(local: &Local, peer_id: u64, certificate: Option<&[u8]>) -> Result<(), String> {
    let addr = local
        .voters
        .get(&peer_id)
        .ok_or_else(|| format!("node {} is not a voter", node_id_of(peer_id)))?;
    let name = voter_host(addr).ok_or_else(|| format!("voter address {addr} has no host name TLS can check"))?;
    let certificate = certificate.ok_or("it presented no certificate")?;
    let der = rustls::pki_types::CertificateDer::from(certificate);
    let cert = webpki::EndEntityCert::try_from(&der).map_err(|e| format!("its certificate does not parse: {e}"))?;
    cert.verify_is_valid_for_subject_name(&name).map_err(|_| {
        format!(
            "node {}'s certificate does not name {addr}, its --voters host; give each voter a certificate for the host the others dial",
            node_id_of(peer_id)
        )
    })
}

/// Connects to `peer_id` at `addr` (over TLS when configured, checking its certificate names
/// that host) and authenticates both ends.
async fn connect(addr: &str, peer_id: u64, local: &Local) -> Result<BufWriter<Box<dyn Io>>, HandshakeError> {
    let Some(secret) = local.secret.as_ref() else {
        return Err(HandshakeError::NoSecret);
    };
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
    let _ = stream.set_nodelay(true);
    let stream: Box<dyn Io> = match &local.tls {
        None => Box::new(stream),
        Some(tls) => {
            let name = voter_host(addr).ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, format!("{addr} has no host TLS can check"))
            })?;
            let connector = tokio_rustls::TlsConnector::from((tls.configs)().1);
            let tls_stream = tokio::time::timeout(HANDSHAKE_TIMEOUT, connector.connect(name, stream))
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "the TLS handshake timed out"))??;
            Box::new(tls_stream)
        }
    };
    let mut stream = BufWriter::new(stream);
    tokio::time::timeout(
        HANDSHAKE_TIMEOUT,
        handshake::dial(&mut stream, local.node_id, peer_id, &local.cluster_id, secret),
    )
    .await
    .map_err(|_| {
        io::Error::new(
            io::ErrorKind::TimedOut,
            "the peer did not complete the handshake in time",
        )
    })??;
    Ok(stream)
}

async fn write_batch(writer: &mut (impl AsyncWrite + Unpin), batch: &[Message]) -> io::Result<()> {
    for msg in batch {
        let bytes = msg.encode_to_vec();
        if bytes.len() > MAX_FRAME_BYTES {
            // Sending it would make the receiver drop the connection; skip just this message.
            tracing::error!(to = node_id_of(msg.to), bytes = bytes.len(), max = MAX_FRAME_BYTES, msg_type = ?msg.get_msg_type(), "raft message exceeds the frame limit; dropped");
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

/// A connection to a quorum member's controller listener that speaks as node `node_id` would:
/// for tests and tools that need to reach a node's Raft layer (e.g. to check that forged
/// messages are refused). Sluice itself uses [`Transport`].
pub struct PeerConnection {
    stream: BufWriter<Box<dyn Io>>,
}

impl PeerConnection {
    /// Connects to node `peer_id` at `addr` and runs the handshake as node `node_id`.
    pub async fn connect(
        addr: &str,
        node_id: u64,
        peer_id: u64,
        cluster_id: &str,
        secret: &ClusterSecret,
    ) -> Result<PeerConnection, HandshakeError> {
        let local = Local {
            node_id,
            cluster_id: cluster_id.to_owned(),
            secret: Some(secret.clone()),
            tls: None,
            voters: Default::default(),
        };
        Ok(PeerConnection {
            stream: connect(addr, peer_id, &local).await?,
        })
    }

    /// Sends one Raft message as a frame.
    pub async fn send(&mut self, msg: &Message) -> io::Result<()> {
        write_batch(&mut self.stream, std::slice::from_ref(msg)).await
    }

    /// Writes `bytes` as they are, e.g. part of a frame, to test the node's framing.
    pub async fn send_bytes(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes).await?;
        self.stream.flush().await
    }

    /// Whether the node closed this connection within `within` (it never writes after the
    /// handshake, so any read result but a timeout means closed).
    pub async fn closed_within(&mut self, within: Duration) -> bool {
        let mut byte = [0u8; 1];
        tokio::time::timeout(within, self.stream.get_mut().read(&mut byte))
            .await
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::read_frame;

    fn secret() -> ClusterSecret {
        ClusterSecret::new(b"transport-test-secret".to_vec()).unwrap()
    }

    #[tokio::test]
    async fn oversized_frame_is_refused_before_allocating() {
        let mut bytes: &[u8] = &[0xff, 0xff, 0xff, 0xff];
        let err = read_frame(&mut bytes, MAX_FRAME_BYTES).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }

    #[tokio::test]
    async fn frame_cut_short_is_an_error_not_a_zero_filled_buffer() {
        let mut bytes: &[u8] = &[0, 0, 0, 10, 1, 2, 3];
        let err = read_frame(&mut bytes, MAX_FRAME_BYTES).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        let mut empty: &[u8] = &[];
        assert!(read_frame(&mut empty, MAX_FRAME_BYTES).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_started_frame_that_stalls_is_dropped_after_the_timeout() {
        let (mut peer, mut node) = tokio::io::duplex(64);
        let (inbound_tx, mut inbound_rx) = mpsc::channel(8);
        let timeout = Duration::from_millis(200);
        let forwarding = tokio::spawn(async move { forward_messages(&mut node, 2, inbound_tx, timeout).await });
        // Half of a 100-byte frame, then silence (the peer keeps the connection open).
        peer.write_all(&[0, 0, 0, 100]).await.unwrap();
        peer.write_all(&[0; 50]).await.unwrap();
        let err = forwarding.await.unwrap().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("did not finish it"), "{err}");
        assert!(inbound_rx.try_recv().is_err());
    }

    /// Runs `frames` through the listener's read loop as node 2's connection; returns what it
    /// forwarded and how the loop ended.
    async fn forward_frames(frames: &[&[u8]]) -> (Vec<Message>, io::Result<()>) {
        let (mut peer, mut node) = tokio::io::duplex(1 << 16);
        let (inbound_tx, mut inbound_rx) = mpsc::channel(8);
        for frame in frames {
            write_frame(&mut peer, frame).await.unwrap();
        }
        drop(peer);
        let ended = forward_messages(&mut node, 2, inbound_tx, Duration::from_secs(5)).await;
        let mut forwarded = Vec::new();
        while let Ok(inbound) = inbound_rx.try_recv() {
            forwarded.push(inbound.msg);
        }
        (forwarded, ended)
    }

    /// A message as a member built with rust-protobuf 2 (raft's `protobuf-codec`) sent it: in a
    /// rolling upgrade, members on either side of the switch to prost must read each other.
    #[tokio::test]
    async fn message_written_with_rust_protobuf_decodes_field_for_field() {
        let old = include_bytes!("../testdata/protobuf2/message.bin");
        let (forwarded, ended) = forward_frames(&[old]).await;
        ended.unwrap();
        let [msg] = &forwarded[..] else {
            panic!("one message, got {forwarded:?}")
        };
        assert_eq!(msg.get_msg_type(), MessageType::MsgAppend);
        assert_eq!((msg.to, msg.from, msg.term, msg.log_term, msg.index), (2, 1, 3, 2, 2));
        assert_eq!((msg.commit, msg.commit_term, msg.priority), (3, 2, -5));
        assert_eq!((msg.reject, msg.reject_hint, msg.request_snapshot), (true, 9, 1));
        assert_eq!(msg.context.as_ref(), b"mctx");
        let indexes: Vec<_> = msg.entries.iter().map(|e| (e.index, e.term, e.data.len())).collect();
        assert_eq!(indexes, [(2, 2, 20), (3, 2, 13), (4, 3, 0)]);
        assert_eq!(
            msg.entries[0].get_entry_type(),
            raft::eraftpb::EntryType::EntryConfChange
        );
        assert_eq!(msg.entries[1].context.as_ref(), b"ctx3");
        let snapshot = msg.get_snapshot();
        assert_eq!(snapshot.data.as_ref(), b"snapdata");
        let conf = snapshot.get_metadata().get_conf_state();
        assert_eq!(
            (&conf.voters[..], &conf.learners[..], conf.auto_leave),
            (&[1, 2, 3][..], &[4][..], true)
        );
        // prost packs repeated numbers where rust-protobuf did not; each reads the other's.
        assert_eq!(Message::decode(msg.encode_to_vec().as_slice()).unwrap(), *msg);
    }

    #[tokio::test]
    async fn field_length_beyond_the_frame_is_refused_as_undecodable() {
        // `context` (field 12) claiming 4 GiB, then `entries` (field 7) claiming 1 TiB, in a
        // frame of a few bytes: refused before any buffer of that size exists.
        for lying in [
            &[0x62, 0xff, 0xff, 0xff, 0xff, 0x0f, 1, 2][..],
            &[0x3a, 0x80, 0x80, 0x80, 0x80, 0x80, 0x20, 1],
        ] {
            let (forwarded, ended) = forward_frames(&[lying]).await;
            let err = ended.unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidData);
            assert!(
                err.to_string().contains("undecodable raft message from node 1"),
                "{err}"
            );
            assert!(forwarded.is_empty());
        }
    }

    #[tokio::test]
    async fn peer_with_wrong_secret_or_other_cluster_cannot_connect() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (inbound_tx, mut inbound_rx) = mpsc::channel(8);
        let (events_tx, _events_rx) = mpsc::channel(8);
        let transport = Transport::start(
            listener,
            1,
            "cluster-a",
            Some(secret()),
            None,
            Default::default(),
            inbound_tx,
            events_tx,
        );

        let wrong = ClusterSecret::new(b"some-other-secret-value".to_vec()).unwrap();
        let refused = PeerConnection::connect(&addr, 2, 1, "cluster-a", &wrong).await.err();
        assert!(
            matches!(refused, Some(HandshakeError::BadProof { peer: 1 })),
            "{refused:?}"
        );
        let refused = PeerConnection::connect(&addr, 2, 1, "cluster-b", &secret()).await.err();
        // The listener hangs up on a stranger's hello instead of answering it.
        assert!(matches!(refused, Some(HandshakeError::Io(_))), "{refused:?}");
        let refused = PeerConnection::connect(&addr, 2, 3, "cluster-a", &secret()).await.err();
        assert!(
            matches!(
                refused,
                Some(HandshakeError::WrongPeer {
                    expected: 3,
                    answered: 1
                })
            ),
            "{refused:?}"
        );
        assert!(inbound_rx.try_recv().is_err());
        transport.shutdown().await;
    }

    #[tokio::test]
    async fn messages_reach_the_peer_in_order_tagged_with_the_authenticated_sender() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (inbound_tx, mut inbound_rx) = mpsc::channel(64);
        let (events_tx, _events_rx) = mpsc::channel(8);
        let receiver = Transport::start(
            listener,
            1,
            "c",
            Some(secret()),
            None,
            Default::default(),
            inbound_tx,
            events_tx,
        );

        let sender_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (tx2, _rx2) = mpsc::channel(8);
        let (ev2, _ev2_rx) = mpsc::channel(64);
        let mut sender = Transport::start(
            sender_listener,
            2,
            "c",
            Some(secret()),
            None,
            Default::default(),
            tx2,
            ev2,
        );
        for i in 1..=10u64 {
            let mut msg = Message::default();
            msg.from = 2;
            msg.to = 1;
            msg.index = i;
            assert_eq!(sender.send(msg, &addr), SendOutcome::Queued);
        }
        for i in 1..=10u64 {
            let inbound = tokio::time::timeout(Duration::from_secs(5), inbound_rx.recv())
                .await
                .expect("message within 5 s")
                .expect("channel open");
            assert_eq!(inbound.peer_id, 2);
            assert_eq!(inbound.msg.index, i);
        }
        sender.shutdown().await;
        receiver.shutdown().await;
    }

    /// A CA and, per name, a certificate for it that it signed, as rustls configurations for
    /// both ends of a quorum connection (client certificates required).
    fn tls_for(names: &[&str]) -> Vec<QuorumTls> {
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.der().clone()).unwrap();
        let roots = Arc::new(roots);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        names
            .iter()
            .map(|name| {
                let key = rcgen::KeyPair::generate().unwrap();
                let params = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
                let cert = params.signed_by(&key, &issuer).unwrap();
                let chain = vec![CertificateDer::from(cert.der().to_vec())];
                let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
                let verifier =
                    rustls::server::WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
                        .build()
                        .unwrap();
                let server = rustls::ServerConfig::builder_with_provider(provider.clone())
                    .with_safe_default_protocol_versions()
                    .unwrap()
                    .with_client_cert_verifier(verifier)
                    .with_single_cert(chain.clone(), key.clone_key())
                    .unwrap();
                let client = rustls::ClientConfig::builder_with_provider(provider.clone())
                    .with_safe_default_protocol_versions()
                    .unwrap()
                    .with_root_certificates(roots.clone())
                    .with_client_auth_cert(chain, key)
                    .unwrap();
                let configs = (Arc::new(server), Arc::new(client));
                QuorumTls {
                    configs: Arc::new(move || configs.clone()),
                }
            })
            .collect()
    }

    /// A TLS receiver (node 1, certificate for 127.0.0.1) and sender (node 2, certificate for
    /// `sender_cert_name`): the receiver's inbound queue, both transports, the receiver's address.
    async fn tls_pair(sender_cert_name: &str) -> (mpsc::Receiver<Inbound>, Transport, Transport, String) {
        let tls = tls_for(&["127.0.0.1", sender_cert_name]);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let sender_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let sender_addr = sender_listener.local_addr().unwrap().to_string();
        let voters: std::collections::BTreeMap<u64, String> = [(1, addr.clone()), (2, sender_addr)].into();
        let (inbound_tx, inbound_rx) = mpsc::channel(64);
        let (events_tx, _events_rx) = mpsc::channel(8);
        let receiver = Transport::start(
            listener,
            1,
            "c",
            Some(secret()),
            Some(tls[0].clone()),
            voters.clone(),
            inbound_tx,
            events_tx,
        );
        let (tx2, _rx2) = mpsc::channel(8);
        let (ev2, _evr2) = mpsc::channel(8);
        let sender = Transport::start(
            sender_listener,
            2,
            "c",
            Some(secret()),
            Some(tls[1].clone()),
            voters,
            tx2,
            ev2,
        );
        (inbound_rx, receiver, sender, addr)
    }

    fn heartbeat(from: u64, to: u64) -> Message {
        let mut msg = Message::default();
        msg.set_msg_type(MessageType::MsgHeartbeat);
        msg.from = from;
        msg.to = to;
        msg
    }

    #[tokio::test]
    async fn quorum_members_talk_over_mutual_tls_when_certificates_name_their_voter_hosts() {
        let (mut inbound, _receiver, mut sender, addr) = tls_pair("127.0.0.1").await;
        assert_eq!(sender.send(heartbeat(2, 1), &addr), SendOutcome::Queued);
        let got = tokio::time::timeout(Duration::from_secs(10), inbound.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!((got.peer_id, got.msg.get_msg_type()), (2, MessageType::MsgHeartbeat));
    }

    #[tokio::test]
    async fn a_member_whose_certificate_names_another_host_is_refused() {
        let (mut inbound, _receiver, mut sender, addr) = tls_pair("impostor.example").await;
        for _ in 0..3 {
            sender.send(heartbeat(2, 1), &addr);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let got = tokio::time::timeout(Duration::from_secs(2), inbound.recv()).await;
        assert!(got.is_err(), "a message from a mis-certified peer arrived: {got:?}");
    }
}
