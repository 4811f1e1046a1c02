//! Mutual authentication of quorum peers: a challenge–response over the shared cluster secret.
//!
//! Node ids, the cluster id and addresses are public (they are in every node's flags), so they
//! cannot authenticate anyone. Each controller connection therefore starts with three frames:
//!
//! 1. dialer → listener, `hello`: magic, protocol version, the dialer's node id, the cluster id
//!    and a fresh random nonce.
//! 2. listener → dialer, `challenge`: the listener's node id, its own fresh nonce and its proof.
//! 3. dialer → listener, `proof`: the dialer's proof.
//!
//! A proof is HMAC-SHA256 keyed by the secret over a direction label ("listener" or "dialer"),
//! the cluster id, both node ids and both nonces. Each side proves it knows the secret without
//! sending it; the other side's fresh nonce makes a recorded proof useless later, and the label
//! keeps a listener's proof from being reflected back as a dialer's. Proofs are compared in
//! constant time. Only after step 3 does the listener read a Raft message.
//!
//! Not covered: the frames after the handshake are neither encrypted nor signed, so someone who
//! can alter traffic between two nodes can still tamper with an authenticated connection. Keep
//! controller listeners on a private network (or a tunnel) for that.

use std::fmt;
use std::io;
use std::sync::Arc;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::frame::{read_frame, write_frame};
use crate::node_id_of;

/// Shortest cluster secret accepted: 128 bits, assuming random bytes.
pub const MIN_CLUSTER_SECRET_BYTES: usize = 16;
/// How an operator makes a secret; quoted by every error that asks for one.
pub const CREATE_SECRET_HINT: &str = "create one with `head -c 32 /dev/urandom | base64 > cluster-secret`, copy that file to every node, keep it private, and pass --cluster-secret-file cluster-secret (or set SLUICE_CLUSTER_SECRET to its contents)";

const HANDSHAKE_MAGIC: &[u8; 4] = b"SLRQ";
/// 1: unauthenticated hello. 2: this challenge–response.
const PROTOCOL_VERSION: u16 = 2;
/// Largest handshake frame (the hello, whose cluster id is at most 255 bytes).
pub(crate) const MAX_HANDSHAKE_BYTES: usize = 1024;
const NONCE_BYTES: usize = 32;
const PROOF_BYTES: usize = 32;
const CHALLENGE_BYTES: usize = 8 + NONCE_BYTES + PROOF_BYTES;
const LISTENER_LABEL: &[u8] = b"sluice-quorum-listener";
const DIALER_LABEL: &[u8] = b"sluice-quorum-dialer";

type Nonce = [u8; NONCE_BYTES];

/// The secret every member of a multi-node quorum shares. Its bytes never appear in `Debug`.
#[derive(Clone)]
pub struct ClusterSecret(Arc<[u8]>);

/// A secret shorter than [`MIN_CLUSTER_SECRET_BYTES`].
#[derive(Debug, thiserror::Error)]
#[error(
    "the cluster secret is {0} bytes long; it must be at least {MIN_CLUSTER_SECRET_BYTES} bytes: {CREATE_SECRET_HINT}"
)]
pub struct SecretTooShort(pub usize);

impl ClusterSecret {
    /// Accepts `bytes` as they are (callers trim text they read from a file or the environment).
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<ClusterSecret, SecretTooShort> {
        let bytes: Vec<u8> = bytes.into();
        if bytes.len() < MIN_CLUSTER_SECRET_BYTES {
            return Err(SecretTooShort(bytes.len()));
        }
        Ok(ClusterSecret(bytes.into()))
    }

    /// A key for another use of the secret, HMAC-SHA256 keyed by it over `label`, so the
    /// secret itself never leaves this module (the brokers derive their inter-broker
    /// credential this way). Distinct labels give unrelated keys.
    pub fn derive(&self, label: &[u8]) -> [u8; 32] {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0).unwrap_or_else(|_| unreachable!());
        mac.update(b"sluice-derived-key:");
        mac.update(label);
        mac.finalize().into_bytes().into()
    }
}

impl fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClusterSecret(<{} bytes, redacted>)", self.0.len())
    }
}

/// Why a handshake failed; the connection is closed.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("malformed handshake (not a Sluice quorum peer?)")]
    Malformed,
    #[error("the peer speaks quorum protocol version {theirs}, this node {ours}; run matching Sluice versions on every node")]
    Version { theirs: u16, ours: u16 },
    #[error(
        "node {} belongs to cluster {theirs:?}, this node to {ours:?}; check both nodes' --cluster-id and --voters", node_id_of(*.peer)
    )]
    OtherCluster { peer: u64, theirs: String, ours: String },
    #[error("the peer claims node id {}, which is reserved or this node's own; check its --node-id", node_id_of(*.0))]
    BadPeerId(u64),
    #[error("dialed node {} but node {} answered; check that --voters is identical on every node", node_id_of(*.expected), node_id_of(*.answered))]
    WrongPeer { expected: u64, answered: u64 },
    #[error("node {} failed to prove it knows the cluster secret; give every node the same secret (--cluster-secret-file or SLUICE_CLUSTER_SECRET)", node_id_of(*.peer))]
    BadProof { peer: u64 },
    #[error("this node is its quorum's only voter and has no cluster secret, so it accepts no controller connections; to let other nodes in, give every node the same secret: {CREATE_SECRET_HINT}")]
    NoSecret,
    #[error("the system random number generator failed: {0}")]
    Random(String),
}

impl HandshakeError {
    /// Failures worth a warning: a refused peer or bytes that are no handshake at all (an
    /// oversized frame), as opposed to a peer that went away mid-handshake.
    pub(crate) fn is_misconfiguration(&self) -> bool {
        match self {
            HandshakeError::Io(e) => e.kind() == io::ErrorKind::InvalidData,
            _ => true,
        }
    }
}

/// Authenticates an outbound connection to node `peer_id`: sends the hello, checks the
/// listener's proof and node id, then sends this node's proof. Afterwards the stream carries
/// length-prefixed Raft messages from `node_id` to `peer_id`.
///
/// Public so that tests (and tools) can talk to a quorum port as a real peer does.
pub async fn dial(
    stream: &mut (impl AsyncRead + AsyncWrite + Unpin),
    node_id: u64,
    peer_id: u64,
    cluster_id: &str,
    secret: &ClusterSecret,
) -> Result<(), HandshakeError> {
    let dialer_nonce = random_nonce()?;
    write_frame(stream, &encode_hello(node_id, cluster_id, &dialer_nonce)).await?;
    stream.flush().await?;
    let frame = read_handshake_frame(stream).await?;
    let challenge = decode_challenge(&frame)?;
    if challenge.node_id != peer_id {
        return Err(HandshakeError::WrongPeer {
            expected: peer_id,
            answered: challenge.node_id,
        });
    }
    let transcript = Transcript {
        cluster_id,
        dialer_id: node_id,
        listener_id: peer_id,
        dialer_nonce: &dialer_nonce,
        listener_nonce: &challenge.nonce,
    };
    if !transcript.verify(secret, LISTENER_LABEL, &challenge.proof) {
        return Err(HandshakeError::BadProof { peer: peer_id });
    }
    write_frame(stream, &transcript.proof(secret, DIALER_LABEL)).await?;
    stream.flush().await?;
    Ok(())
}

/// Authenticates an inbound connection; returns the dialer's node id once it has proved it
/// knows `secret`. Without a secret (a lone voter) every dialer is refused.
pub(crate) async fn accept(
    stream: &mut (impl AsyncRead + AsyncWrite + Unpin),
    node_id: u64,
    cluster_id: &str,
    secret: Option<&ClusterSecret>,
) -> Result<u64, HandshakeError> {
    let frame = read_handshake_frame(stream).await?;
    let hello = decode_hello(&frame)?;
    if hello.cluster_id != cluster_id {
        return Err(HandshakeError::OtherCluster {
            peer: hello.node_id,
            theirs: hello.cluster_id,
            ours: cluster_id.to_owned(),
        });
    }
    if hello.node_id == 0 || hello.node_id == node_id {
        return Err(HandshakeError::BadPeerId(hello.node_id));
    }
    let secret = secret.ok_or(HandshakeError::NoSecret)?;
    let listener_nonce = random_nonce()?;
    let transcript = Transcript {
        cluster_id,
        dialer_id: hello.node_id,
        listener_id: node_id,
        dialer_nonce: &hello.nonce,
        listener_nonce: &listener_nonce,
    };
    let mut challenge = Vec::with_capacity(CHALLENGE_BYTES);
    challenge.extend_from_slice(&node_id.to_be_bytes());
    challenge.extend_from_slice(&listener_nonce);
    challenge.extend_from_slice(&transcript.proof(secret, LISTENER_LABEL));
    write_frame(stream, &challenge).await?;
    stream.flush().await?;
    let proof = read_handshake_frame(stream).await?;
    if !transcript.verify(secret, DIALER_LABEL, &proof) {
        return Err(HandshakeError::BadProof { peer: hello.node_id });
    }
    Ok(hello.node_id)
}

/// The next handshake frame; the peer hanging up instead is an I/O error.
async fn read_handshake_frame(stream: &mut (impl AsyncRead + Unpin)) -> Result<Vec<u8>, HandshakeError> {
    read_frame(stream, MAX_HANDSHAKE_BYTES)
        .await?
        .ok_or_else(|| HandshakeError::Io(io::ErrorKind::UnexpectedEof.into()))
}

/// What both proofs cover.
struct Transcript<'a> {
    cluster_id: &'a str,
    dialer_id: u64,
    listener_id: u64,
    dialer_nonce: &'a Nonce,
    listener_nonce: &'a Nonce,
}

impl Transcript<'_> {
    fn mac(&self, secret: &ClusterSecret, label: &[u8]) -> Hmac<Sha256> {
        // HMAC takes keys of any length; this cannot fail.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&secret.0).unwrap_or_else(|_| unreachable!());
        // Every variable-length part is length-prefixed, so distinct transcripts never collide.
        mac.update(&(label.len() as u16).to_be_bytes());
        mac.update(label);
        mac.update(&(self.cluster_id.len() as u16).to_be_bytes());
        mac.update(self.cluster_id.as_bytes());
        mac.update(&self.dialer_id.to_be_bytes());
        mac.update(&self.listener_id.to_be_bytes());
        mac.update(self.dialer_nonce);
        mac.update(self.listener_nonce);
        mac
    }

    fn proof(&self, secret: &ClusterSecret, label: &[u8]) -> Vec<u8> {
        self.mac(secret, label).finalize().into_bytes().to_vec()
    }

    /// Constant-time comparison (`verify_slice`); a proof of the wrong length fails.
    fn verify(&self, secret: &ClusterSecret, label: &[u8], proof: &[u8]) -> bool {
        self.mac(secret, label).verify_slice(proof).is_ok()
    }
}

struct Hello {
    node_id: u64,
    cluster_id: String,
    nonce: Nonce,
}

struct Challenge {
    node_id: u64,
    nonce: Nonce,
    proof: [u8; PROOF_BYTES],
}

fn random_nonce() -> Result<Nonce, HandshakeError> {
    let mut nonce = [0u8; NONCE_BYTES];
    getrandom::getrandom(&mut nonce).map_err(|e| HandshakeError::Random(e.to_string()))?;
    Ok(nonce)
}

fn encode_hello(node_id: u64, cluster_id: &str, nonce: &Nonce) -> Vec<u8> {
    let mut buf = Vec::with_capacity(16 + cluster_id.len() + NONCE_BYTES);
    buf.extend_from_slice(HANDSHAKE_MAGIC);
    buf.extend_from_slice(&PROTOCOL_VERSION.to_be_bytes());
    buf.extend_from_slice(&node_id.to_be_bytes());
    buf.extend_from_slice(&(cluster_id.len() as u16).to_be_bytes());
    buf.extend_from_slice(cluster_id.as_bytes());
    buf.extend_from_slice(nonce);
    buf
}

/// Reads big-endian fields off the front of a handshake frame.
struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], HandshakeError> {
        if self.0.len() < n {
            return Err(HandshakeError::Malformed);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], HandshakeError> {
        self.take(N)?.try_into().map_err(|_| HandshakeError::Malformed)
    }

    fn finish(self) -> Result<(), HandshakeError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(HandshakeError::Malformed)
        }
    }
}

fn decode_hello(frame: &[u8]) -> Result<Hello, HandshakeError> {
    let mut fields = Fields(frame);
    if fields.take(4)? != HANDSHAKE_MAGIC {
        return Err(HandshakeError::Malformed);
    }
    let version = u16::from_be_bytes(fields.array()?);
    if version != PROTOCOL_VERSION {
        return Err(HandshakeError::Version {
            theirs: version,
            ours: PROTOCOL_VERSION,
        });
    }
    let node_id = u64::from_be_bytes(fields.array()?);
    let len = u16::from_be_bytes(fields.array()?) as usize;
    let cluster_id = String::from_utf8(fields.take(len)?.to_vec()).map_err(|_| HandshakeError::Malformed)?;
    let nonce = fields.array()?;
    fields.finish()?;
    Ok(Hello {
        node_id,
        cluster_id,
        nonce,
    })
}

fn decode_challenge(frame: &[u8]) -> Result<Challenge, HandshakeError> {
    let mut fields = Fields(frame);
    let challenge = Challenge {
        node_id: u64::from_be_bytes(fields.array()?),
        nonce: fields.array()?,
        proof: fields.array()?,
    };
    fields.finish()?;
    Ok(challenge)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(text: &str) -> ClusterSecret {
        ClusterSecret::new(text.as_bytes()).unwrap()
    }

    /// Runs `accept` on one end of a pipe and `dial` on the other.
    async fn handshake(
        listener_secret: Option<ClusterSecret>,
        dialer_secret: ClusterSecret,
        dialer_cluster: &str,
    ) -> (Result<u64, HandshakeError>, Result<(), HandshakeError>) {
        let (mut a, mut b) = tokio::io::duplex(4096);
        let listener = tokio::spawn(async move { accept(&mut a, 1, "cluster-a", listener_secret.as_ref()).await });
        let dialed = dial(&mut b, 2, 1, dialer_cluster, &dialer_secret).await;
        drop(b);
        (listener.await.unwrap(), dialed)
    }

    #[test]
    fn short_secret_is_refused_and_debug_hides_the_bytes() {
        let err = ClusterSecret::new(b"fifteen-bytes!!".to_vec()).unwrap_err();
        assert!(err.to_string().contains("at least 16 bytes"), "{err}");
        assert!(err.to_string().contains("head -c 32 /dev/urandom"), "{err}");
        let shown = format!("{:?}", secret("a-secret-of-24-bytes-xyz"));
        assert!(!shown.contains("a-secret"), "{shown}");
    }

    #[tokio::test]
    async fn same_secret_authenticates_both_sides() {
        let (accepted, dialed) = handshake(
            Some(secret("0123456789abcdef")),
            secret("0123456789abcdef"),
            "cluster-a",
        )
        .await;
        assert_eq!(accepted.unwrap(), 2);
        dialed.unwrap();
    }

    #[tokio::test]
    async fn different_secrets_fail_on_the_dialer_which_never_sends_a_proof() {
        let (accepted, dialed) = handshake(
            Some(secret("0123456789abcdef")),
            secret("fedcba9876543210"),
            "cluster-a",
        )
        .await;
        assert!(
            matches!(dialed, Err(HandshakeError::BadProof { peer: 1 })),
            "{dialed:?}"
        );
        // The listener saw the dialer hang up instead of proving anything.
        assert!(matches!(accepted, Err(HandshakeError::Io(_))), "{accepted:?}");
    }

    #[tokio::test]
    async fn a_forged_dialer_proof_is_refused() {
        let (mut a, mut b) = tokio::io::duplex(4096);
        let listener =
            tokio::spawn(async move { accept(&mut a, 1, "cluster-a", Some(&secret("0123456789abcdef"))).await });
        write_frame(&mut b, &encode_hello(2, "cluster-a", &[7; NONCE_BYTES]))
            .await
            .unwrap();
        let challenge = read_frame(&mut b, MAX_HANDSHAKE_BYTES).await.unwrap().unwrap();
        // Echo the listener's own proof back: the direction label makes it worthless.
        write_frame(&mut b, &challenge[8 + NONCE_BYTES..]).await.unwrap();
        let accepted = listener.await.unwrap();
        assert!(
            matches!(accepted, Err(HandshakeError::BadProof { peer: 2 })),
            "{accepted:?}"
        );
        assert!(accepted
            .unwrap_err()
            .to_string()
            .contains("give every node the same secret"));
    }

    #[tokio::test]
    async fn other_cluster_and_lone_voter_are_refused_before_any_proof() {
        let (accepted, _) = handshake(
            Some(secret("0123456789abcdef")),
            secret("0123456789abcdef"),
            "cluster-b",
        )
        .await;
        assert!(
            matches!(accepted, Err(HandshakeError::OtherCluster { .. })),
            "{accepted:?}"
        );
        let (accepted, _) = handshake(None, secret("0123456789abcdef"), "cluster-a").await;
        assert!(matches!(accepted, Err(HandshakeError::NoSecret)), "{accepted:?}");
    }

    #[test]
    fn garbage_and_truncated_frames_do_not_decode() {
        let hello = encode_hello(3, "c", &[1; NONCE_BYTES]);
        assert!(decode_hello(&hello).is_ok());
        assert!(matches!(
            decode_hello(b"GET / HTTP/1.1"),
            Err(HandshakeError::Malformed)
        ));
        assert!(matches!(
            decode_hello(&hello[..hello.len() - 1]),
            Err(HandshakeError::Malformed)
        ));
        let mut old = hello.clone();
        old[5] = 1;
        assert!(matches!(
            decode_hello(&old),
            Err(HandshakeError::Version { theirs: 1, .. })
        ));
        assert!(matches!(
            decode_challenge(&[0; CHALLENGE_BYTES - 1]),
            Err(HandshakeError::Malformed)
        ));
    }
}
