//! One client connection: frames in, responses out, strictly in request order.
//!
//! A reader decodes each request and runs its handler's synchronous part at once, in
//! arrival order (so two produces to one partition append in the order sent); handlers that
//! must wait (long-poll fetch) hand back a future. A writer sends the responses in request
//! order, awaiting each deferred one in turn. The channel between them bounds in-flight
//! requests per connection; a memory semaphore bounds request bytes across the broker.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::BytesMut;
use futures::future::BoxFuture;
use futures::FutureExt;
use sluice_protocol::frame::{peek_frame_size, take_frame, SIZE_PREFIX_LEN};
use sluice_protocol::request::{decode_request, encode_api_versions_too_new, encode_response, RequestError};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};

use crate::api::{self, Reply};
use crate::broker::Broker;

/// A response slot in the writer's queue.
enum Outgoing {
    Ready(BytesMut),
    Deferred(BoxFuture<'static, Option<BytesMut>>),
}

const READ_BUFFER_BYTES: usize = 64 * 1024;

pub async fn serve(broker: Arc<Broker>, stream: TcpStream, peer: SocketAddr, mut shutdown: watch::Receiver<bool>) {
    let (mut reader, writer) = stream.into_split();
    let (queue, pending) = mpsc::channel(broker.config.max_in_flight_requests_per_connection.max(1));
    let writer_task = tokio::spawn(write_responses(writer, pending, peer));
    let max_bytes = broker.config.socket_request_max_bytes;
    let mut buf = BytesMut::with_capacity(READ_BUFFER_BYTES);
    let close_reason: Option<String> = loop {
        let frame = match take_frame(&mut buf, max_bytes) {
            Ok(Some(frame)) => frame,
            Ok(None) => {
                if let Ok(Some(size)) = peek_frame_size(&buf, max_bytes) {
                    buf.reserve(SIZE_PREFIX_LEN + size - buf.len().min(SIZE_PREFIX_LEN + size));
                } else if buf.capacity() - buf.len() < 4096 {
                    buf.reserve(READ_BUFFER_BYTES);
                }
                let read = tokio::select! {
                    _ = shutdown.changed() => break None,
                    read = reader.read_buf(&mut buf) => read,
                };
                match read {
                    Ok(0) if buf.is_empty() => break None,
                    Ok(0) => break Some(format!("connection closed mid-request with {} bytes unread", buf.len())),
                    Ok(_) => continue,
                    Err(e) => break Some(format!("read failed: {e}")),
                }
            }
            Err(e) => break Some(e.to_string()),
        };
        // A frame larger than the whole budget takes all of it rather than waiting for ever.
        let wanted = frame
            .len()
            .clamp(1, broker.config.queued_max_request_bytes.clamp(1, u32::MAX as usize));
        let permit = match broker.request_memory.clone().acquire_many_owned(wanted as u32).await {
            Ok(permit) => permit,
            Err(_) => break None,
        };
        let outgoing = match decode_request(frame.freeze()) {
            Ok(request) => {
                let (version, correlation_id) = (request.api_version, request.header.correlation_id);
                match api::handle(&broker, request, peer) {
                    Reply::None => continue,
                    Reply::Now(body) => match encode_response(version, correlation_id, &body) {
                        Ok(bytes) => Outgoing::Ready(bytes),
                        Err(e) => break Some(e.to_string()),
                    },
                    Reply::Later(future) => Outgoing::Deferred(
                        future
                            .map(move |body| match encode_response(version, correlation_id, &body) {
                                Ok(bytes) => Some(bytes),
                                Err(e) => {
                                    tracing::error!(%peer, error = %e, "dropping a response that failed to encode");
                                    None
                                }
                            })
                            .boxed(),
                    ),
                }
            }
            Err(RequestError::ApiVersionsTooNew {
                correlation_id,
                version,
            }) => {
                tracing::debug!(%peer, version, "answering a too-new ApiVersions with v0 UNSUPPORTED_VERSION");
                match encode_api_versions_too_new(correlation_id, &api::api_versions::unsupported_version_reply()) {
                    Ok(bytes) => Outgoing::Ready(bytes),
                    Err(e) => break Some(e.to_string()),
                }
            }
            Err(RequestError::Malformed(reason)) => break Some(reason),
        };
        drop(permit);
        if queue.send(outgoing).await.is_err() {
            break None; // the writer failed; it has logged why
        }
    };
    if let Some(reason) = close_reason {
        tracing::warn!(%peer, "closing connection: {reason}");
    }
    drop(queue);
    let _ = writer_task.await;
}

async fn write_responses(writer: OwnedWriteHalf, mut pending: mpsc::Receiver<Outgoing>, peer: SocketAddr) {
    let mut writer = BufWriter::with_capacity(64 * 1024, writer);
    while let Some(outgoing) = pending.recv().await {
        let bytes = match outgoing {
            Outgoing::Ready(bytes) => Some(bytes),
            Outgoing::Deferred(future) => future.await,
        };
        let mut result = match bytes {
            Some(bytes) => writer.write_all(&bytes).await,
            None => Ok(()),
        };
        // Coalesce back-to-back responses into one write; flush when the queue is empty.
        if result.is_ok() && pending.is_empty() {
            result = writer.flush().await;
        }
        if let Err(e) = result {
            tracing::debug!(%peer, error = %e, "client went away while responses were pending");
            return;
        }
    }
    let _ = writer.shutdown().await;
}
