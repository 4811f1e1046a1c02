//! One client connection: frames in, responses out, strictly in request order.
//!
//! A reader decodes each request and runs its handler's synchronous part at once, in
//! arrival order (so two produces to one partition append in the order sent); handlers that
//! must wait (long-poll fetch) hand back a future. A writer sends the responses in request
//! order, awaiting each deferred one in turn. The channel between them bounds in-flight
//! requests per connection.
//!
//! A frame's share of the broker-wide request memory (`queued.max.request.bytes`) is taken as
//! soon as its size prefix arrives, before its body is buffered, and held until its handler
//! has run. Once a frame has started it must arrive whole within
//! `socket.request.read.timeout.ms`. A connection that neither sent a request nor was sent a
//! response for `connections.max.idle.ms`, and is owed none, is closed (Kafka's idle expiry
//! counts reads and writes alike: a long poll answered after the idle limit leaves its
//! connection open).
//!
//! A response carrying a quota's throttle time (Produce, Fetch) mutes the connection: as
//! Kafka does since KIP-219, the response goes out at once and no further request from the
//! client is read until the throttle time has passed.
//!
//! Security: [`accept`] runs the TLS handshake on a TLS listener (telling apart a client that
//! speaks plaintext to it) and takes the client certificate's principal; on a plaintext
//! listener a TLS hello is recognised and refused. The reader hands SaslHandshake,
//! SaslAuthenticate and bare v0 tokens to the connection's `Authenticator`, and lets no other
//! request through before it has authenticated (see `security::authenticator`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use futures::future::BoxFuture;
use futures::FutureExt;
use kafka_protocol::messages::ApiKey;
use sluice_protocol::frame::{peek_frame_size, FrameError, SIZE_PREFIX_LEN};
use sluice_protocol::request::Request;
use sluice_protocol::request::{
    decode_request, encode_api_versions_too_new, encode_response, encode_response_frame, RequestError,
};
use sluice_protocol::response_frame::ResponseFrame;
use sluice_protocol::RequestBody;
use sluice_protocol::ResponseBody;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::api::{self, Reply, Session};
use crate::broker::Broker;
use crate::metrics::{BrokerMetrics, ConnectionGuard};
use crate::security::authenticator::{Authenticator, SaslReply, SaslResponse};
use crate::security::tls;

/// A response slot in the writer's queue.
enum Outgoing {
    Ready(BytesMut),
    /// A response still being worked out; its frame may reference record sets by chunk.
    Deferred(BoxFuture<'static, Option<ResponseFrame>>),
}

/// A queued response and what its request's time is recorded under once it is written
/// (Kafka's RequestMetrics TotalTimeMs: from the request fully read to its response sent).
struct Queued {
    response: Outgoing,
    api_key: i16,
    received: Instant,
    /// The request's place among the connection's unanswered requests: one of
    /// `max.in.flight.requests.per.connection` and its bytes of
    /// `max.in.flight.request.bytes.per.connection`, given back once its response is written.
    slot: Option<InFlight>,
}

struct InFlight {
    _request: OwnedSemaphorePermit,
    _bytes: OwnedSemaphorePermit,
}

const READ_BUFFER_BYTES: usize = 64 * 1024;

/// The responses a connection still owes, and when it last sent one: shared by the reader,
/// which closes idle connections, and the writer.
struct Owed {
    since: Instant,
    unanswered: AtomicUsize,
    /// ms after `since` when the last response was written.
    answered_ms: AtomicU64,
}

impl Owed {
    fn new() -> Owed {
        Owed {
            since: Instant::now(),
            unanswered: AtomicUsize::new(0),
            answered_ms: AtomicU64::new(0),
        }
    }

    fn answered(&self) {
        self.answered_ms
            .fetch_max(self.since.elapsed().as_millis() as u64, Ordering::Relaxed);
        self.unanswered.fetch_sub(1, Ordering::Relaxed);
    }

    fn last_answered(&self) -> Instant {
        self.since + Duration::from_millis(self.answered_ms.load(Ordering::Relaxed))
    }
}

/// Until when the connection is muted by a quota throttle: ms after `since`, 0 when never.
/// Set by whichever response carries the throttle (possibly a deferred one, on the writer),
/// read by the reader before each request.
struct Mute {
    since: Instant,
    until_ms: AtomicU64,
}

impl Mute {
    fn new() -> Mute {
        Mute {
            since: Instant::now(),
            until_ms: AtomicU64::new(0),
        }
    }

    /// Mutes for `throttle_time_ms` from now, unless already muted for longer.
    fn throttle(&self, throttle_time_ms: i32) {
        if throttle_time_ms > 0 {
            let until = self.since.elapsed().as_millis() as u64 + throttle_time_ms as u64;
            self.until_ms.fetch_max(until, Ordering::Relaxed);
        }
    }

    /// When reading may resume, if the connection is muted now.
    fn muted_until(&self) -> Option<Instant> {
        let until = self.since + Duration::from_millis(self.until_ms.load(Ordering::Relaxed));
        (until > Instant::now()).then_some(until)
    }
}

/// The quota throttle time a response carries.
fn throttle_time_ms(body: &ResponseBody) -> i32 {
    match body {
        ResponseBody::Produce(r) => r.throttle_time_ms,
        ResponseBody::Fetch(r) => r.throttle_time_ms,
        _ => 0,
    }
}

/// Serves one accepted connection: over TLS on a TLS listener (after the handshake), as is
/// otherwise.
pub async fn accept(
    broker: Arc<Broker>,
    stream: TcpStream,
    mut session: Session,
    mut counted: ConnectionGuard,
    shutdown: watch::Receiver<bool>,
) {
    let Some(tls) = broker.security.tls(&session.listener).cloned() else {
        let (reader, writer) = stream.into_split();
        return serve(broker, reader, writer, session, counted, shutdown).await;
    };
    let peer = session.peer;
    let listener = session.listener.clone();
    let timeout = Duration::from_millis(broker.config.socket_request_read_timeout_ms);
    let mut first = [0u8; 5];
    match tokio::time::timeout(timeout, stream.peek(&mut first)).await {
        Ok(Ok(0)) | Ok(Err(_)) => return,
        Ok(Ok(n)) if !tls::looks_like_tls_hello(&first[..n]) => {
            tracing::warn!(%peer, %listener,
                "closing connection: it sent plaintext to listener {listener}, which speaks TLS; configure the client with security.protocol=SSL (or SASL_SSL), or connect it to a PLAINTEXT listener");
            close_after_discarding_input(stream).await;
            return;
        }
        Ok(Ok(_)) => {}
        Err(_) => {
            tracing::debug!(%peer, %listener, "closing a TLS connection that sent nothing within socket.request.read.timeout.ms");
            return;
        }
    }
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.server_config());
    let stream = match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            broker.security.count_authentication(&listener, false);
            tracing::warn!(%peer, %listener, "closing connection: the TLS handshake failed ({e}); check the client's truststore trusts this broker's certificate and, with ssl.client.auth, that the client's certificate is valid and signed by a CA in this broker's truststore");
            return;
        }
        Err(_) => {
            tracing::warn!(%peer, %listener, "closing connection: the TLS handshake did not finish within socket.request.read.timeout.ms");
            return;
        }
    };
    let sasl = broker
        .security
        .listener(&listener)
        .is_some_and(|l| l.protocol.uses_sasl());
    if !sasl {
        // On an SSL listener the client is its certificate (or ANONYMOUS without one).
        match tls::certificate_principal(&tls.principal_rules, stream.get_ref().1.peer_certificates()) {
            Some(principal) => session.principal = Arc::from(principal),
            None => {
                broker.security.count_authentication(&listener, false);
                tracing::warn!(%peer, %listener, "closing connection: no ssl.principal.mapping.rules rule matches the client certificate's name; add a rule for it, or end the rules with DEFAULT");
                return;
            }
        }
        if session.principal.as_ref() != crate::security::ANONYMOUS {
            broker.security.count_authentication(&listener, true);
            counted.set_principal(&session.principal);
        }
    }
    let (reader, writer) = tokio::io::split(stream);
    serve(broker, reader, writer, session, counted, shutdown).await
}

/// Closes a connection after reading what the client already sent (at most 64 KiB). Closing
/// a socket with unread input makes the kernel answer with a reset, and the client then sees
/// "connection reset by peer" instead of the connection ending, which is what Kafka's clients
/// turn into their hint (librdkafka: "connecting to a SSL listener?").
async fn close_after_discarding_input(mut stream: TcpStream) {
    let mut discard = [0u8; 4096];
    for _ in 0..16 {
        match stream.try_read(&mut discard) {
            Ok(n) if n > 0 => continue,
            _ => break,
        }
    }
    let _ = stream.shutdown().await;
}

async fn serve<R, W>(
    broker: Arc<Broker>,
    mut reader: R,
    writer: W,
    mut session: Session,
    mut counted: ConnectionGuard,
    mut shutdown: watch::Receiver<bool>,
) where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let peer = session.peer;
    // Requests read and not yet answered, and their bytes, at most: each holds its records (a
    // producer's are up to a megabyte) until its response is written, and the next request
    // waits in the socket's buffer, where it costs the broker no memory of its own.
    let max_in_flight = broker.config.max_in_flight_requests_per_connection.max(1);
    let in_flight = Arc::new(Semaphore::new(max_in_flight));
    let in_flight_budget = broker
        .config
        .max_in_flight_request_bytes_per_connection
        .clamp(1, (u32::MAX as usize).min(Semaphore::MAX_PERMITS));
    let in_flight_bytes = Arc::new(Semaphore::new(in_flight_budget));
    // The place of the frame being received among them, taken with its request memory.
    let mut frame_slot: Option<InFlight> = None;
    let (queue, pending) = mpsc::channel(max_in_flight);
    let owed = Arc::new(Owed::new());
    let writer_task = tokio::spawn(write_responses(
        writer,
        pending,
        peer,
        owed.clone(),
        broker.metrics.clone(),
    ));
    let mut auth = Authenticator::new(broker.security.clone(), session.listener.clone());
    let plaintext = broker.security.tls(&session.listener).is_none();
    let mut first_frame = true;
    let max_bytes = broker.config.socket_request_max_bytes;
    let budget = broker.config.queued_max_request_bytes.clamp(1, u32::MAX as usize);
    let idle_timeout = Duration::from_millis(broker.config.connections_max_idle_ms);
    let frame_timeout = Duration::from_millis(broker.config.socket_request_read_timeout_ms);
    let mut buf = BytesMut::with_capacity(READ_BUFFER_BYTES);
    let mut last_read = Instant::now();
    // When the first byte of the frame being received arrived (or its memory was granted).
    let mut frame_started: Option<Instant> = None;
    // Request memory for the frame being received, taken as soon as its size prefix is in.
    let mut permit: Option<OwnedSemaphorePermit> = None;
    let mute = Arc::new(Mute::new());
    let close_reason: Option<String> = loop {
        if first_frame && plaintext && buf.len() >= 2 {
            if tls::looks_like_tls_hello(&buf) {
                break Some(format!(
                    "it sent a TLS handshake to listener {}, which is not a TLS listener; configure the client with security.protocol=PLAINTEXT (or SASL_PLAINTEXT), or connect it to an SSL/SASL_SSL listener",
                    session.listener
                ));
            }
            first_frame = false;
        }
        // Before authentication only small frames are read (sasl.server.max.receive.size).
        let size = match peek_frame_size(&buf, auth.max_frame_bytes(max_bytes)) {
            Ok(size) => size,
            Err(FrameError::TooLarge { size, max }) if auth.is_authenticating() => break Some(format!(
                "frame size {size} exceeds {max}, the limit before authentication (sasl.server.max.receive.size); a client sends only small SASL requests until it has logged in"
            )),
            Err(e) => break Some(e.to_string()),
        };
        if let (Some(size), None) = (size, &permit) {
            // The connection's own share first: it waits only for this connection's responses,
            // so no connection can hold up another's (a follower's fetch that a waiting
            // acks=all produce needs). A frame larger than a budget takes all of it.
            let own = tokio::select! {
                _ = shutdown.changed() => break None,
                own = async {
                    let request = in_flight.clone().acquire_owned().await?;
                    let bytes = in_flight_bytes.clone().acquire_many_owned(size.clamp(1, in_flight_budget) as u32).await?;
                    Ok::<_, tokio::sync::AcquireError>(InFlight { _request: request, _bytes: bytes })
                } => own,
            };
            let Ok(own) = own else { break None };
            frame_slot = Some(own);
            let wanted = size.clamp(1, budget) as u32;
            let granted = tokio::select! {
                _ = shutdown.changed() => break None,
                granted = broker.request_memory.clone().acquire_many_owned(wanted) => granted,
            };
            let Ok(granted) = granted else { break None };
            permit = Some(granted);
            buf.reserve((SIZE_PREFIX_LEN + size).saturating_sub(buf.len()));
            frame_started = Some(Instant::now());
        }
        if let Some(size) = size.filter(|size| buf.len() >= SIZE_PREFIX_LEN + size) {
            let slot = frame_slot.take();
            if let Some(until) = mute.muted_until() {
                tokio::select! {
                    _ = shutdown.changed() => break None,
                    _ = tokio::time::sleep_until(until) => {}
                }
                last_read = Instant::now();
            }
            buf.advance(SIZE_PREFIX_LEN);
            let frame = buf.split_to(size);
            frame_started = (!buf.is_empty()).then(Instant::now);
            let request_memory = permit.take();
            let received = Instant::now();
            let decoded = if auth.expects_raw_token() {
                // After a v0 SaslHandshake the SASL tokens come as bare frames.
                let reply = auth
                    .raw_token(frame.freeze(), broker.metadata.image(), &mut session.principal)
                    .await;
                counted.set_principal(&session.principal);
                match send_sasl_reply(&queue, &owed, reply, 0, 0, received, &mut shutdown).await {
                    Ok(()) => continue,
                    Err(reason) => break reason,
                }
            } else {
                decode_request(frame.freeze())
            };
            let decoded = match decoded {
                Ok(request) if is_sasl(&request.body) => {
                    let (version, correlation_id) = (request.api_version, request.header.correlation_id);
                    let reply = match request.body {
                        RequestBody::SaslHandshake(r) => auth.handshake(version, &r, &session.principal),
                        RequestBody::SaslAuthenticate(r) => {
                            auth.authenticate(version, r, broker.metadata.image(), &mut session.principal)
                                .await
                        }
                        _ => unreachable!("is_sasl matched"),
                    };
                    counted.set_principal(&session.principal);
                    match send_sasl_reply(&queue, &owed, reply, version, correlation_id, received, &mut shutdown).await
                    {
                        Ok(()) => continue,
                        Err(reason) => break reason,
                    }
                }
                Ok(request) => match auth.screen(request.header.request_api_key, received.into_std()) {
                    Ok(()) => Ok(request),
                    Err(reason) => break Some(reason),
                },
                Err(e) => Err(e),
            };
            let outgoing = match answer(&broker, decoded, &session, &mute, received) {
                Ok(Some(outgoing)) => Queued { slot, ..outgoing },
                Ok(None) => continue,
                Err(reason) => break Some(reason),
            };
            drop(request_memory);
            owed.unanswered.fetch_add(1, Ordering::Relaxed);
            if queue.send(outgoing).await.is_err() {
                break None; // the writer failed; it has logged why
            }
            continue;
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(READ_BUFFER_BYTES);
        }
        let deadline = match frame_started {
            Some(started) => started + frame_timeout,
            None => last_read + idle_timeout,
        };
        let read = tokio::select! {
            _ = shutdown.changed() => break None,
            read = tokio::time::timeout_at(deadline, reader.read_buf(&mut buf)) => read,
        };
        match read {
            Ok(Ok(0)) if buf.is_empty() => break None,
            Ok(Ok(0)) => break Some(format!("connection closed mid-request with {} bytes unread", buf.len())),
            Ok(Ok(_)) => {
                last_read = Instant::now();
                frame_started.get_or_insert(last_read);
            }
            // A TLS client that just closes, without close_notify, is not a problem to report.
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof && buf.is_empty() => break None,
            Ok(Err(e)) => break Some(format!("read failed: {e}")),
            Err(_) if frame_started.is_some() => {
                break Some(format!(
                    "a request was not received in full within socket.request.read.timeout.ms={} ({} bytes so far); \
                     the client is too slow or stalled",
                    frame_timeout.as_millis(),
                    buf.len()
                ))
            }
            // Responses still owed (a long poll) keep the connection in use, and so does one
            // sent within the idle limit.
            Err(_) if owed.unanswered.load(Ordering::Relaxed) > 0 => last_read = Instant::now(),
            Err(_) if owed.last_answered() > last_read => last_read = owed.last_answered(),
            Err(_) => {
                tracing::debug!(%peer, idle_ms = idle_timeout.as_millis() as u64,
                    "closing a connection idle for connections.max.idle.ms");
                break None;
            }
        }
    };
    if let Some(reason) = close_reason {
        tracing::warn!(%peer, listener = %session.listener, principal = %session.principal, "closing connection: {reason}");
    }
    drop(queue);
    let _ = writer_task.await;
    let closed = broker.share.connection_closed(session.connection_id);
    if !closed.is_empty() {
        let broker = broker.clone();
        tokio::spawn(async move {
            for (group_id, member_id) in closed {
                tracing::debug!(group = %group_id, member = %member_id, "share session closed with its connection; releasing the member's records");
                broker
                    .share_persister
                    .close_session(&broker.share, &group_id, &member_id)
                    .await;
            }
        });
    }
}

fn is_sasl(body: &RequestBody) -> bool {
    matches!(body, RequestBody::SaslHandshake(_) | RequestBody::SaslAuthenticate(_))
}

/// Queues the authenticator's answer. `Err` closes the connection (with a reason to log, or
/// `None` on shutdown), after the failed-authentication delay, once the answer is queued.
async fn send_sasl_reply(
    queue: &mpsc::Sender<Queued>,
    owed: &Owed,
    reply: SaslReply,
    version: i16,
    correlation_id: i32,
    received: Instant,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<(), Option<String>> {
    if let Some((delay, _)) = &reply.close {
        // KIP-306: the answer to a failed authentication waits, so guessing is slow.
        tokio::select! {
            _ = shutdown.changed() => return Err(None),
            _ = tokio::time::sleep(*delay) => {}
        }
    }
    let (api_key, bytes) = match reply.response {
        None => (ApiKey::SaslAuthenticate as i16, None),
        Some(SaslResponse::Raw(token)) => {
            let mut bytes = BytesMut::with_capacity(SIZE_PREFIX_LEN + token.len());
            bytes.extend_from_slice(&(token.len() as i32).to_be_bytes());
            bytes.extend_from_slice(&token);
            (ApiKey::SaslAuthenticate as i16, Some(bytes))
        }
        Some(SaslResponse::Handshake(r)) => (
            ApiKey::SaslHandshake as i16,
            Some(
                encode_response(version, correlation_id, &ResponseBody::SaslHandshake(r))
                    .map_err(|e| Some(e.to_string()))?,
            ),
        ),
        Some(SaslResponse::Authenticate(r)) => (
            ApiKey::SaslAuthenticate as i16,
            Some(
                encode_response(version, correlation_id, &ResponseBody::SaslAuthenticate(r))
                    .map_err(|e| Some(e.to_string()))?,
            ),
        ),
    };
    if let Some(bytes) = bytes {
        owed.unanswered.fetch_add(1, Ordering::Relaxed);
        let queued = Queued {
            response: Outgoing::Ready(bytes),
            api_key,
            received,
            slot: None,
        };
        if queue.send(queued).await.is_err() {
            return Err(None);
        }
    }
    match reply.close {
        Some((_, reason)) => Err(Some(reason)),
        None => Ok(()),
    }
}

/// Decodes a frame and runs its handler's synchronous part: the response to queue, `None`
/// when the request gets no response (acks=0), or why the connection must close.
fn answer(
    broker: &Arc<Broker>,
    decoded: Result<Request, RequestError>,
    session: &Session,
    mute: &Arc<Mute>,
    received: Instant,
) -> Result<Option<Queued>, String> {
    let peer = session.peer;
    let unanswered = |api_key: i16| {
        if let Some(request) = broker.metrics.request(api_key) {
            request.total_time_ms.record(received.elapsed());
        }
    };
    let queued = |api_key: i16, response: Outgoing| Queued {
        response,
        api_key,
        received,
        slot: None,
    };
    match decoded {
        Ok(request) => {
            let (version, correlation_id) = (request.api_version, request.header.correlation_id);
            let api_key = request.header.request_api_key;
            match api::handle(broker, request, session) {
                Reply::None => {
                    unanswered(api_key);
                    Ok(None)
                }
                Reply::Close(reason) => Err(reason),
                Reply::Throttled(throttle_time_ms) => {
                    unanswered(api_key);
                    mute.throttle(throttle_time_ms);
                    Ok(None)
                }
                Reply::Now(body) => {
                    mute.throttle(throttle_time_ms(&body));
                    encode_response(version, correlation_id, &body)
                        .map(|bytes| Some(queued(api_key, Outgoing::Ready(bytes))))
                        .map_err(|e| e.to_string())
                }
                Reply::Later(future) => {
                    let mute = mute.clone();
                    Ok(Some(queued(api_key, Outgoing::Deferred(
                        future
                            .map(move |body| {
                                mute.throttle(throttle_time_ms(&body));
                                match encode_response_frame(version, correlation_id, &body) {
                                    Ok(frame) => Some(frame),
                                    Err(e) => {
                                        tracing::error!(%peer, error = %e, "dropping a response that failed to encode");
                                        None
                                    }
                                }
                            })
                            .boxed(),
                    ))))
                }
            }
        }
        Err(RequestError::ApiVersionsTooNew {
            correlation_id,
            version,
        }) => {
            tracing::debug!(%peer, version, "answering a too-new ApiVersions with v0 UNSUPPORTED_VERSION");
            encode_api_versions_too_new(correlation_id, &api::api_versions::unsupported_version_reply())
                .map(|bytes| Some(queued(ApiKey::ApiVersions as i16, Outgoing::Ready(bytes))))
                .map_err(|e| e.to_string())
        }
        Err(RequestError::Malformed(reason)) => Err(reason),
    }
}

/// Writes a frame chunk by chunk: record sets larger than the buffer go to the socket
/// straight from the bytes the fetch read.
async fn write_frame<W: AsyncWrite + Unpin>(writer: &mut BufWriter<W>, frame: &ResponseFrame) -> std::io::Result<()> {
    for chunk in &frame.chunks {
        writer.write_all(chunk).await?;
    }
    Ok(())
}

async fn write_responses<W: AsyncWrite + Unpin + Send>(
    writer: W,
    mut pending: mpsc::Receiver<Queued>,
    peer: SocketAddr,
    owed: Arc<Owed>,
    metrics: Arc<BrokerMetrics>,
) {
    let mut writer = BufWriter::with_capacity(64 * 1024, writer);
    while let Some(queued) = pending.recv().await {
        // Back-to-back responses that are ready coalesce into one write; whatever is buffered
        // goes out before waiting, for a deferred response (a pipelining producer's queue is
        // never empty, and its answered requests must not wait for the next one's replication)
        // or for the next request.
        let written = match queued.response {
            Outgoing::Ready(bytes) => writer.write_all(&bytes).await,
            Outgoing::Deferred(mut future) => {
                let frame = match futures::poll!(future.as_mut()) {
                    std::task::Poll::Ready(frame) => Ok(frame),
                    std::task::Poll::Pending => match writer.flush().await {
                        Ok(()) => Ok(future.await),
                        Err(e) => Err(e),
                    },
                };
                match frame {
                    Ok(Some(frame)) => write_frame(&mut writer, &frame).await,
                    Ok(None) => Ok(()),
                    Err(e) => Err(e),
                }
            }
        };
        if let Some(request) = metrics.request(queued.api_key) {
            request.total_time_ms.record(queued.received.elapsed());
        }
        owed.answered();
        // The reader may take the connection's next request.
        drop(queued.slot);
        let result = match written {
            Ok(()) if pending.is_empty() => writer.flush().await,
            other => other,
        };
        if let Err(e) = result {
            tracing::debug!(%peer, error = %e, "client went away while responses were pending");
            return;
        }
    }
    let _ = writer.shutdown().await;
}
