//! The console's JSON. `/api/cluster` is this broker's view of the cluster with the groups of
//! every live broker that serves a console (each broker knows only the groups it
//! coordinates); `/api/history` adds up the brokers' samples. Peers are asked for their
//! `/api/local` over the HTTP address they registered, all at once, each bounded in time and
//! size; a peer that does not answer is listed in `unreachable` and the page says so. They are
//! asked over TLS when `metrics.ssl.enable` is set and with the brokers' own HTTP credentials
//! when `metrics.authentication` asks for them.

use std::time::Duration;

use base64::Engine;
use futures::future::join_all;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::snapshot::{self, ClientView, ClusterView, GroupView};
use crate::broker::Broker;
use crate::metrics::history::{self, Sample};

/// How long a peer has to answer, connection included.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest peer answer read; a larger one counts as no answer.
pub const MAX_PEER_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// What a broker tells the other brokers' consoles: its own groups and samples.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LocalView {
    pub node_id: i32,
    pub groups: Vec<GroupView>,
    pub history: Vec<Sample>,
    /// Its client connections by listener and principal (absent from older builds).
    #[serde(default)]
    pub clients: Vec<ClientView>,
    /// Record bytes it has sent to consumers since it started (absent from older builds).
    #[serde(default)]
    pub consumer_bytes_out: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct HistoryView {
    pub interval_ms: i64,
    pub samples: Vec<Sample>,
}

pub fn local(broker: &Broker) -> LocalView {
    LocalView {
        node_id: broker.config.node_id,
        groups: snapshot::take(broker).groups,
        history: broker.history.samples(),
        clients: snapshot::clients(broker),
        consumer_bytes_out: Some(snapshot::consumer_bytes_out(broker).0),
    }
}

pub async fn cluster(broker: &Broker) -> ClusterView {
    let mut view = snapshot::take(broker);
    let (peers, unreachable) = ask_peers(broker, &view).await;
    for peer in peers {
        if let Some(b) = view.brokers.iter_mut().find(|b| b.node_id == peer.node_id) {
            b.consumer_bytes_out = peer.consumer_bytes_out;
            b.consumer_bytes_out_per_s = peer.history.last().map(|s| s.bytes_out_per_s);
        }
        view.groups.extend(peer.groups);
        view.clients.extend(peer.clients);
    }
    view.groups.sort_by(|a, b| a.group_id.cmp(&b.group_id));
    // A group that moved between coordinators while they were asked appears once.
    view.groups.dedup_by(|a, b| a.group_id == b.group_id);
    view.unreachable = unreachable;
    view.racks = snapshot::racks(&view.brokers);
    view
}

pub async fn history(broker: &Broker) -> HistoryView {
    let view = snapshot::take(broker);
    let (peers, _) = ask_peers(broker, &view).await;
    let peers: Vec<Vec<Sample>> = peers.into_iter().map(|p| p.history).collect();
    HistoryView {
        interval_ms: history::SAMPLE_INTERVAL_MS,
        samples: history::merge(&broker.history.samples(), &peers),
    }
}

/// The other live brokers' local views, and the ids of those that gave none.
async fn ask_peers(broker: &Broker, view: &ClusterView) -> (Vec<LocalView>, Vec<i32>) {
    let peers: Vec<_> = view
        .brokers
        .iter()
        .filter(|b| b.live && b.node_id != broker.config.node_id)
        .map(|b| (b.node_id, b.http.clone()))
        .collect();
    let answers = join_all(peers.into_iter().map(|(node_id, http)| async move {
        let answer = match http {
            Some((host, port)) => fetch_local(broker, &host, port).await,
            None => Err("it does not serve a console (metrics.listen is not set there)".to_string()),
        };
        (node_id, answer)
    }))
    .await;
    let mut views = Vec::new();
    let mut unreachable = Vec::new();
    for (node_id, answer) in answers {
        match answer {
            Ok(local) if local.node_id == node_id => views.push(local),
            Ok(local) => {
                tracing::debug!(
                    node_id,
                    answered = local.node_id,
                    "a peer console answered for another node"
                );
                unreachable.push(node_id);
            }
            Err(e) => {
                tracing::debug!(node_id, error = %e, "the console could not ask a peer for its groups");
                unreachable.push(node_id);
            }
        }
    }
    (views, unreachable)
}

async fn fetch_local(broker: &Broker, host: &str, port: i32) -> Result<LocalView, String> {
    let address = snapshot::host_port(host, port);
    let security = &broker.security;
    let authorization = match security.settings.metrics_authentication {
        crate::config::security::MetricsAuthentication::None => String::new(),
        _ => match security.broker_http_credentials() {
            Some((user, password)) => format!(
                "Authorization: Basic {}\r\n",
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
            ),
            None => String::new(),
        },
    };
    let request = format!("GET /api/local HTTP/1.1\r\nHost: {address}\r\n{authorization}Connection: close\r\n\r\n");
    let exchange = async {
        let stream = TcpStream::connect(&address).await.map_err(|e| e.to_string())?;
        match security.metrics_tls() {
            None => exchange_on(stream, &request).await,
            Some(tls) => {
                let name = rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|e| e.to_string())?;
                let stream = tokio_rustls::TlsConnector::from(tls.client_config())
                    .connect(name, stream)
                    .await
                    .map_err(|e| format!("TLS with it failed: {e}"))?;
                exchange_on(stream, &request).await
            }
        }
    };
    let response = tokio::time::timeout(PEER_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("no answer within {PEER_TIMEOUT:?}"))??;
    let Some(body_at) = response.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Err("its answer has no HTTP head".into());
    };
    if !response.starts_with(b"HTTP/1.1 200") {
        return Err("its answer is not 200 OK".into());
    }
    serde_json::from_slice(&response[body_at + 4..]).map_err(|e| format!("its answer does not decode: {e}"))
}

/// Sends `request` and reads the answer, at most [`MAX_PEER_RESPONSE_BYTES`].
async fn exchange_on<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, request: &str) -> Result<Vec<u8>, String> {
    stream.write_all(request.as_bytes()).await.map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    let mut limited = (&mut stream).take(MAX_PEER_RESPONSE_BYTES as u64 + 1);
    // A TLS peer may close without close_notify after `Connection: close`: keep what arrived.
    if let Err(e) = limited.read_to_end(&mut response).await {
        if response.is_empty() {
            return Err(e.to_string());
        }
    }
    if response.len() > MAX_PEER_RESPONSE_BYTES {
        return Err(format!("its answer is larger than {MAX_PEER_RESPONSE_BYTES} bytes"));
    }
    Ok(response)
}
