//! TLS and SASL on real brokers, with certificates made here (a test CA; broker certificates
//! naming 127.0.0.1 and localhost; a client certificate):
//!
//! - a 3-node cluster whose only listener is SASL_SSL (SCRAM-SHA-512, the authorizer on)
//!   replicates over TLS with the brokers' own login, and an idempotent `acks=all` rdkafka
//!   producer loses no acknowledged record when the leader is SIGKILLed;
//! - Kafka-style inter-broker credentials (`sasl.mechanism.inter.broker.protocol` and a JAAS
//!   line) on SASL_PLAINTEXT, and an SSL inter-broker listener requiring client certificates,
//!   both replicate;
//! - hand-encoded exchanges on a SASL listener: nothing but ApiVersions and SASL before
//!   authentication (and nothing written), Kafka's error codes and messages, the
//!   pre-authentication frame cap, hostile tokens that get an error or a close (never a
//!   panic), and SaslHandshake v0's bare tokens;
//! - with the authorizer on, a follower's Fetch from a user without CLUSTER_ACTION is refused
//!   per partition (TOPIC_AUTHORIZATION_FAILED, as Kafka) before the replica identity check, and
//!   reads and changes nothing; a share-partition leader's ReadShareGroupState and
//!   WriteShareGroupState from such a user are CLUSTER_AUTHORIZATION_FAILED and store nothing.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context, Result};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{BrokerId, ListOffsetsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::Offset;
use sluice_integration_tests::clients::{self, wait_until};
use sluice_integration_tests::faults::{self, await_identical_replicas};
use sluice_integration_tests::kafka_client::{self, KafkaConnection};
use sluice_integration_tests::pki::Pki;
use sluice_integration_tests::security::{SaslLogin, SaslMechanism, ScramClient};
use sluice_integration_tests::wire::{self, Encoder};
use sluice_integration_tests::{procstat, retry_port_races, ClientSecurity, Cluster, NodeOptions, SluiceNode};
use tempfile::TempDir;

const ADMIN: &str = "admin";
const ADMIN_PASSWORD: &str = "admin-secret";
/// The first user, created by every node once registered (Kafka's `kafka-storage format` syntax).
const ADD_ADMIN: &str = "SCRAM-SHA-512=[name=admin,password=admin-secret]";
const AUTHORIZER: &str = "org.apache.kafka.metadata.authorizer.StandardAuthorizer";
const TIMEOUT: Duration = Duration::from_secs(30);
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// Kafka's message for a failed SCRAM exchange (wrong password and unknown user alike).
const SCRAM_FAILED: &str =
    "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512";
/// Kafka's message for a failed PLAIN login.
const PLAIN_FAILED: &str = "Authentication failed: Invalid username or password";

fn admin(mechanism: SaslMechanism) -> SaslLogin {
    SaslLogin::new(mechanism, ADMIN, ADMIN_PASSWORD)
}

fn owned(settings: &[(&str, &str)]) -> Vec<(String, String)> {
    settings.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// A cluster of `size` nodes with `settings`, the listener `listener` (`None`: node.json's
/// PLAINTEXT one), the admin user from `--add-scram`, reached by the harness as `security`.
fn start_cluster(
    size: usize,
    settings: &[(String, String)],
    listener: Option<&str>,
    security: &ClientSecurity,
) -> Result<Cluster> {
    let settings: Vec<(&str, &str)> = settings.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    retry_port_races(|| {
        Cluster::start_custom(
            size,
            &settings,
            true,
            |_| Vec::new(),
            |_, opts| {
                opts.listener = listener.map(str::to_string);
                opts.client_security = security.clone();
                opts.extra_args
                    .extend(["--add-scram".to_string(), ADD_ADMIN.to_string()]);
            },
        )
    })
}

/// Records `{prefix}-{i}` for `i` in `range` to partition 0 of `topic`, enqueued in batches of
/// `batch` with `pause` between batches (all before any is awaited); fails unless every one is
/// acknowledged. Returns (value, offset) per record, in send order.
async fn produce_paced(
    producer: &FutureProducer,
    topic: &str,
    prefix: &str,
    range: std::ops::Range<usize>,
    batch: usize,
    pause: Duration,
) -> Result<Vec<(String, i64)>> {
    let mut pending = Vec::with_capacity(range.len());
    for i in range {
        if !pending.is_empty() && pending.len() % batch.max(1) == 0 {
            tokio::time::sleep(pause).await;
        }
        let value = format!("{prefix}-{i}");
        let key = format!("k-{i}");
        let record = FutureRecord::to(topic).partition(0).key(&key).payload(&value);
        let future = producer
            .send_result(record)
            .map_err(|(e, _)| anyhow!("enqueue {value}: {e}"))?;
        pending.push((value, future));
    }
    let mut acked = Vec::with_capacity(pending.len());
    for (value, future) in pending {
        let delivery = future
            .await
            .context("delivery future cancelled")?
            .map_err(|(e, _)| anyhow!("{value} was not acknowledged: {e}"))?;
        acked.push((value, delivery.offset));
    }
    Ok(acked)
}

/// [`produce_paced`] all at once.
async fn produce_all(
    producer: &FutureProducer,
    topic: &str,
    prefix: &str,
    range: std::ops::Range<usize>,
) -> Result<Vec<(String, i64)>> {
    produce_paced(producer, topic, prefix, range, usize::MAX, Duration::ZERO).await
}

fn idempotent_producer(bootstrap: &str, security: &ClientSecurity) -> Result<FutureProducer> {
    Ok(clients::secured_producer_config(bootstrap, security)
        .set("enable.idempotence", "true")
        .set("message.timeout.ms", "60000")
        .create()?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sasl_ssl_only_cluster_replicates_over_tls_and_loses_no_acked_record_when_the_leader_is_killed() -> Result<()>
{
    const TOPIC: &str = "secured";
    const RECORDS: usize = 3000;
    let pki = Pki::new()?;
    let security = ClientSecurity::default()
        .tls(pki.client(false))
        .sasl(admin(SaslMechanism::ScramSha512));
    let mut settings = pki.broker_settings();
    settings.extend(owned(&[
        ("sasl.enabled.mechanisms", "SCRAM-SHA-512"),
        ("authorizer.class.name", AUTHORIZER),
        ("super.users", "User:admin"),
        // A killed broker is fenced (and leaves the ISR) within seconds.
        ("broker.session.timeout.ms", "3000"),
    ]));
    let mut cluster = start_cluster(3, &settings, Some("SASL_SSL"), &security)?;
    faults::create_topic(&cluster, 1, TOPIC, 1, 3, &[("min.insync.replicas", "2")])?;
    cluster.await_full_isr(TOPIC, TIMEOUT)?;

    let producer = idempotent_producer(&cluster.bootstrap(), &security)?;
    let mut acked = produce_all(&producer, TOPIC, "secured", 0..RECORDS / 2).await?;
    // The followers fetched every record over TLS, logged in as the brokers' own user.
    let sizes = await_identical_replicas(&cluster, TOPIC, 1, TIMEOUT)?;
    ensure!(sizes[&0] > 0, "no replica holds any bytes: {sizes:?}");

    let leader = cluster.partition_leader(1, TOPIC, 0, TIMEOUT)?;
    let survivor = cluster.ids().into_iter().find(|id| *id != leader).expect("3 nodes");
    // The second half is sent over about a second (30 batches 30 ms apart); the leader is
    // SIGKILLed a third of the way in, so records are sent before, during and after the kill.
    let second_half = produce_paced(
        &producer,
        TOPIC,
        "secured",
        RECORDS / 2..RECORDS,
        RECORDS / 60,
        Duration::from_millis(30),
    );
    let started = Instant::now();
    let (second_half, killed) = tokio::join!(second_half, async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        cluster.node(leader).kill()
    });
    killed?;
    acked.extend(second_half?);
    eprintln!(
        "{RECORDS} records acknowledged; leader {leader} killed 300 ms into the second half, which took {:?}",
        started.elapsed()
    );
    let new_leader = cluster.partition_leader(survivor, TOPIC, 0, TIMEOUT)?;
    ensure!(
        new_leader != leader,
        "node {leader} was killed, yet {survivor} names it leader"
    );

    // Every acknowledged record, once, at the offset it was acknowledged at, in send order
    // (idempotence: the producer's retries across the failover are not duplicated).
    // Bootstrapped from the survivors: librdkafka reports the dead node's refused connections
    // as consume errors.
    let survivors: Vec<String> = cluster
        .ids()
        .into_iter()
        .filter(|id| *id != leader)
        .map(|id| cluster.addr(id).to_string())
        .collect();
    let consumer: StreamConsumer = clients::secured_consumer_config(&survivors.join(","), &security).create()?;
    clients::assign(&consumer, TOPIC, &[0], Offset::Beginning)?;
    let consumed = clients::consume_exact(&consumer, &HashMap::from([(0, RECORDS)]), TIMEOUT).await?;
    let consumed: Vec<(String, i64)> = consumed[&0]
        .iter()
        .map(|c| {
            (
                String::from_utf8_lossy(c.value.as_deref().unwrap_or_default()).into_owned(),
                c.offset,
            )
        })
        .collect();
    ensure!(
        consumed == acked,
        "consumed records differ from the acknowledged ones: first difference {:?}",
        consumed.iter().zip(&acked).find(|(c, a)| c != a)
    );
    let (_, high) = consumer.fetch_watermarks(TOPIC, 0, IO_TIMEOUT)?;
    ensure!(
        high == RECORDS as i64,
        "high watermark {high} after {RECORDS} records: duplicates in the log"
    );

    // The killed node comes back (its probe logs in over TLS) and catches up.
    cluster.node(leader).restart()?;
    cluster.await_full_isr(TOPIC, TIMEOUT)?;
    let sizes_after = await_identical_replicas(&cluster, TOPIC, 1, TIMEOUT)?;
    ensure!(
        sizes_after[&0] > sizes[&0],
        "replicas hold {sizes_after:?} bytes after all records, {sizes:?} after half"
    );
    Ok(())
}

/// Every node has `topic` (3 replicas, `min.insync.replicas=3`), an `acks=all` rdkafka producer
/// connecting as `security` gets all `count` records acknowledged (so both followers fetched
/// each one), and the replicas end identical with the full ISR.
async fn replicates_to_all_three(
    cluster: &Cluster,
    security: &ClientSecurity,
    topic: &str,
    count: usize,
) -> Result<()> {
    faults::create_topic(cluster, 1, topic, 1, 3, &[("min.insync.replicas", "3")])?;
    cluster.await_full_isr(topic, TIMEOUT)?;
    let producer: FutureProducer = clients::secured_producer_config(&cluster.bootstrap(), security).create()?;
    let acked = produce_all(&producer, topic, topic, 0..count).await?;
    ensure!(acked.len() == count, "{} of {count} acknowledged", acked.len());
    let isr = cluster.await_full_isr(topic, TIMEOUT)?;
    ensure!(isr[0].isr.len() == 3, "ISR {:?}", isr[0].isr);
    let sizes = await_identical_replicas(cluster, topic, 1, TIMEOUT)?;
    ensure!(sizes[&0] > 0, "replicas hold no bytes: {sizes:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_style_inter_broker_scram_credentials_replicate_on_sasl_plaintext() -> Result<()> {
    let security = ClientSecurity::default().sasl(admin(SaslMechanism::Plain));
    let jaas = format!(
        "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"{ADMIN}\" password=\"{ADMIN_PASSWORD}\";"
    );
    let settings = owned(&[
        // node.json's --listen listener, PLAINTEXT by name, speaks SASL_PLAINTEXT.
        ("listener.security.protocol.map", "PLAINTEXT:SASL_PLAINTEXT"),
        ("sasl.enabled.mechanisms", "SCRAM-SHA-512,PLAIN"),
        ("sasl.mechanism.inter.broker.protocol", "SCRAM-SHA-512"),
        ("listener.name.plaintext.scram-sha-512.sasl.jaas.config", &jaas),
        ("authorizer.class.name", AUTHORIZER),
        ("super.users", "User:admin"),
    ]);
    let cluster = start_cluster(3, &settings, None, &security)?;
    replicates_to_all_three(&cluster, &security, "kafka-style", 200).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ssl_inter_broker_listener_requiring_client_certificates_replicates() -> Result<()> {
    let pki = Pki::new()?;
    let security = ClientSecurity::default().tls(pki.client(true));
    let mut settings = pki.broker_settings();
    settings.extend(owned(&[
        ("ssl.client.auth", "required"),
        ("inter.broker.listener.name", "SSL"),
    ]));
    let cluster = start_cluster(3, &settings, Some("SSL"), &security)?;
    replicates_to_all_three(&cluster, &security, "mutual-tls", 200).await?;

    // The listener does require a certificate: a client without one gets nothing answered.
    let anonymous = ClientSecurity::default().tls(pki.client(false));
    let refused = anonymous
        .connect(cluster.addr(1), IO_TIMEOUT)
        .and_then(|mut s| wire::api_versions_v0(&mut s, 1));
    ensure!(
        refused.is_err(),
        "a TLS client without a certificate was served: {refused:?}"
    );
    Ok(())
}

// ---- one node, SASL_PLAINTEXT, hand-encoded exchanges ----

/// A node whose listener speaks SASL_PLAINTEXT with SCRAM-SHA-512, PLAIN and OAUTHBEARER (keys
/// from an empty JWKS, so no token is valid), the admin user, and failed logins answered after
/// `failed_delay_ms`. The harness logs in with PLAIN. The TempDir holds the JWKS.
fn sasl_node(failed_delay_ms: u64) -> Result<(SluiceNode, TempDir)> {
    let dir = tempfile::Builder::new().prefix("sluice-it-jwks-").tempdir()?;
    let jwks = dir.path().join("jwks.json");
    std::fs::write(&jwks, r#"{"keys":[]}"#)?;
    let mut opts = NodeOptions::default()
        .set("listener.security.protocol.map", "PLAINTEXT:SASL_PLAINTEXT")
        .set("sasl.enabled.mechanisms", "SCRAM-SHA-512,PLAIN,OAUTHBEARER")
        .set(
            "sasl.oauthbearer.jwks.endpoint.url",
            format!("file://{}", jwks.display()),
        )
        .set("connection.failed.authentication.delay.ms", failed_delay_ms)
        .client_security(ClientSecurity::default().sasl(admin(SaslMechanism::Plain)));
    opts.extra_args = vec!["--add-scram".into(), ADD_ADMIN.into()];
    Ok((SluiceNode::start(opts)?, dir))
}

/// The next response frame, or `None` when the broker closes the connection first.
fn frame_or_close(stream: &mut TcpStream) -> Result<Option<Vec<u8>>> {
    let closed = |e: &io::Error| {
        matches!(
            e.kind(),
            io::ErrorKind::UnexpectedEof
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::BrokenPipe
        )
    };
    let mut len = [0u8; 4];
    match stream.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if closed(&e) => return Ok(None),
        Err(e) => return Err(e).context("waiting for a response or a close"),
    }
    let len = i32::from_be_bytes(len);
    ensure!((0..=1 << 20).contains(&len), "implausible response length {len}");
    let mut frame = vec![0u8; len as usize];
    stream.read_exact(&mut frame).context("response body")?;
    Ok(Some(frame))
}

/// Requires the broker to close `stream` without sending anything more.
fn expect_silent_close(stream: &mut TcpStream, what: &str) -> Result<()> {
    let closed = wire::await_close_by_broker(stream, IO_TIMEOUT).with_context(|| what.to_string())?;
    ensure!(
        closed.received.is_empty(),
        "{what}: the broker answered {} bytes before closing: {:02x?}",
        closed.received.len(),
        &closed.received[..closed.received.len().min(64)]
    );
    Ok(())
}

fn handshake(stream: &mut TcpStream, version: i16, mechanism: &str) -> Result<()> {
    let reply = wire::sasl_handshake(stream, version, mechanism, 7)?;
    ensure!(reply.error_code == 0, "SaslHandshake v{version} {mechanism}: {reply:?}");
    Ok(())
}

/// Log end offset of partition 0 of `topic` (ListOffsets latest, as the admin).
fn log_end_offset(node: &SluiceNode, topic: &str) -> Result<i64> {
    let request = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(-1)])]);
    let response =
        KafkaConnection::connect_secured(node.addr(), node.client_security(), "it", IO_TIMEOUT)?.call(&request, 7)?;
    let p = &response.topics[0].partitions[0];
    ensure!(p.error_code == 0, "ListOffsets {topic}: error code {}", p.error_code);
    Ok(p.offset)
}

fn create_topic(node: &SluiceNode, topic: &str) -> Result<()> {
    let code = kafka_client::create_topic_secured(node.addr(), node.client_security(), topic, 1, IO_TIMEOUT)?;
    ensure!(code == 0, "creating {topic}: error code {code}");
    wait_until(TIMEOUT, "the topic's leader", || log_end_offset(node, topic).ok())?;
    Ok(())
}

/// The broker still logs in a new client and answers it: it did not panic or wedge.
fn still_serves(node: &mut SluiceNode, after: &str) -> Result<()> {
    node.assert_running().with_context(|| format!("after {after}"))?;
    let mut stream = node
        .connect(IO_TIMEOUT)
        .with_context(|| format!("login after {after}"))?;
    let brokers = wire::metadata_brokers(&mut stream, 1, 2).with_context(|| format!("Metadata after {after}"))?;
    ensure!(
        brokers.iter().any(|b| b.node_id == node.node_id()),
        "after {after}: Metadata lists {brokers:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_before_authentication_close_the_connection_and_write_nothing() -> Result<()> {
    let (mut node, _jwks) = sasl_node(100)?;
    create_topic(&node, "guarded")?;
    let batch = wire::record_batch_v2(
        clients::now_ms(),
        &[wire::RawRecord {
            key: Some(b"k"),
            value: Some(b"unauthenticated"),
        }],
    );
    let produce = wire::request_frame(
        wire::API_KEY_PRODUCE,
        3,
        5,
        Some("it"),
        false,
        &wire::produce_body_v3(1, 5000, "guarded", 0, &batch),
    );
    let metadata = wire::request_frame(wire::API_KEY_METADATA, 1, 6, Some("it"), false, &0i32.to_be_bytes());

    // First thing on the connection.
    for (what, frame) in [("Metadata", &metadata), ("Produce", &produce)] {
        let mut s = wire::connect(node.addr(), IO_TIMEOUT)?;
        s.write_all(frame)?;
        expect_silent_close(&mut s, &format!("{what} before authentication"))?;
    }
    // After ApiVersions, which is answered (and advertises the SASL APIs).
    let mut s = wire::connect(node.addr(), IO_TIMEOUT)?;
    let versions = wire::api_versions_v0(&mut s, 1)?;
    ensure!(
        versions.error_code == 0,
        "ApiVersions before authentication: {versions:?}"
    );
    for key in [wire::API_KEY_SASL_HANDSHAKE, wire::API_KEY_SASL_AUTHENTICATE] {
        ensure!(
            versions.range(key).is_some(),
            "ApiVersions does not advertise api key {key}"
        );
    }
    s.write_all(&produce)?;
    expect_silent_close(&mut s, "Produce after ApiVersions, before authentication")?;
    // Between SaslHandshake and a completed SaslAuthenticate.
    for (what, frame) in [("Metadata", &metadata), ("Produce", &produce)] {
        let mut s = wire::connect(node.addr(), IO_TIMEOUT)?;
        handshake(&mut s, 1, "PLAIN")?;
        s.write_all(frame)?;
        expect_silent_close(&mut s, &format!("{what} during the SASL exchange"))?;
    }
    ensure!(
        log_end_offset(&node, "guarded")? == 0,
        "an unauthenticated Produce was written"
    );

    // The same Produce bytes, once logged in, are written: the check above could see them.
    let mut s = node.connect(IO_TIMEOUT)?;
    s.write_all(&produce)?;
    let (_, _, _, error_code, base_offset) = wire::parse_produce_response_first_partition(&wire::read_frame(&mut s)?)?;
    ensure!(
        (error_code, base_offset) == (0, 0),
        "authenticated Produce: error code {error_code}, base offset {base_offset}"
    );
    ensure!(
        log_end_offset(&node, "guarded")? == 1,
        "the authenticated Produce was not written"
    );
    still_serves(&mut node, "requests before authentication")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_sasl_mechanism_is_refused_with_the_enabled_list_and_a_close() -> Result<()> {
    let (mut node, _jwks) = sasl_node(100)?;
    for (version, mechanism) in [(1, "GSSAPI"), (0, "SCRAM-SHA-256"), (1, "plain")] {
        let mut s = wire::connect(node.addr(), IO_TIMEOUT)?;
        let reply = wire::sasl_handshake(&mut s, version, mechanism, 3)?;
        ensure!(
            reply.error_code == wire::ERROR_UNSUPPORTED_SASL_MECHANISM,
            "SaslHandshake v{version} {mechanism}: error code {}, expected UNSUPPORTED_SASL_MECHANISM",
            reply.error_code
        );
        ensure!(
            reply.mechanisms == ["SCRAM-SHA-512", "PLAIN", "OAUTHBEARER"],
            "SaslHandshake v{version} {mechanism} lists {:?}, not the enabled mechanisms",
            reply.mechanisms
        );
        expect_silent_close(&mut s, &format!("after refusing mechanism {mechanism}"))?;
    }
    still_serves(&mut node, "unknown mechanisms")
}

/// SaslAuthenticate v2 of `token` after a v1 handshake for `mechanism`: the answer.
fn authenticate_once(s: &mut TcpStream, mechanism: &str, token: &[u8]) -> Result<wire::SaslAuthenticateReply> {
    handshake(s, 1, mechanism)?;
    wire::sasl_authenticate(s, 2, token, 8)
}

/// Requires a refusal with SASL_AUTHENTICATION_FAILED and `message`, at least `delay` after
/// the token was sent (KIP-306), followed by a close.
fn expect_refusal(
    s: &mut TcpStream,
    reply: wire::SaslAuthenticateReply,
    sent: Instant,
    delay: Duration,
    message: &str,
    what: &str,
) -> Result<()> {
    let took = sent.elapsed();
    ensure!(
        reply.error_code == wire::ERROR_SASL_AUTHENTICATION_FAILED,
        "{what}: error code {} ({:?}), expected SASL_AUTHENTICATION_FAILED",
        reply.error_code,
        reply.error_message
    );
    ensure!(
        reply.error_message.as_deref() == Some(message),
        "{what}: message {:?}, expected Kafka's {message:?}",
        reply.error_message
    );
    ensure!(
        took >= delay,
        "{what}: refused after {took:?}, before connection.failed.authentication.delay.ms ({delay:?})"
    );
    expect_silent_close(s, &format!("{what}: after the refusal"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_passwords_are_refused_with_kafkas_message_after_the_delay_and_then_closed() -> Result<()> {
    let delay = Duration::from_millis(400);
    let (mut node, _jwks) = sasl_node(delay.as_millis() as u64)?;

    for (user, password) in [(ADMIN, "wrong"), ("nobody", ADMIN_PASSWORD)] {
        let what = format!("PLAIN as {user} with password {password}");
        let mut s = wire::connect(node.addr(), IO_TIMEOUT)?;
        let sent = Instant::now();
        let reply = authenticate_once(&mut s, "PLAIN", &wire::sasl_plain_message(user, password))?;
        expect_refusal(&mut s, reply, sent, delay, PLAIN_FAILED, &what)?;
    }

    // SCRAM: a real exchange with the wrong password, and one for a user that does not exist
    // (the broker answers it with a made-up salt, so both fail only at the proof).
    for (user, password) in [(ADMIN, "wrong"), ("nobody", ADMIN_PASSWORD)] {
        let what = format!("SCRAM-SHA-512 as {user} with password {password}");
        let mut s = wire::connect(node.addr(), IO_TIMEOUT)?;
        let mut scram = ScramClient::new(SaslMechanism::ScramSha512, user, password)?;
        let first = authenticate_once(&mut s, "SCRAM-SHA-512", scram.first_message().as_bytes())?;
        ensure!(first.error_code == 0, "{what}: client-first refused: {first:?}");
        let last = scram.final_message(&first.auth_bytes)?;
        let sent = Instant::now();
        let reply = wire::sasl_authenticate(&mut s, 2, last.as_bytes(), 9)?;
        expect_refusal(&mut s, reply, sent, delay, SCRAM_FAILED, &what)?;
    }

    // The right password through SaslAuthenticate v1 (as librdkafka sends it) logs in, the
    // server proves it holds the credential, and requests are served.
    let mut s = wire::connect(node.addr(), IO_TIMEOUT)?;
    handshake(&mut s, 1, "SCRAM-SHA-512")?;
    let mut scram = ScramClient::new(SaslMechanism::ScramSha512, ADMIN, ADMIN_PASSWORD)?;
    let first = wire::sasl_authenticate(&mut s, 1, scram.first_message().as_bytes(), 10)?;
    ensure!(first.error_code == 0, "client-first: {first:?}");
    let last = wire::sasl_authenticate(&mut s, 1, scram.final_message(&first.auth_bytes)?.as_bytes(), 11)?;
    ensure!(last.error_code == 0, "client-final with the right password: {last:?}");
    scram.verify_server_final(&last.auth_bytes)?;
    ensure!(
        last.session_lifetime_ms == 0,
        "session lifetime {} without connections.max.reauth.ms",
        last.session_lifetime_ms
    );
    let brokers = wire::metadata_brokers(&mut s, 1, 12)?;
    ensure!(brokers.len() == 1, "Metadata after SCRAM login: {brokers:?}");
    still_serves(&mut node, "wrong passwords")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_size_prefix_before_authentication_closes_without_the_broker_allocating() -> Result<()> {
    let (mut node, _jwks) = sasl_node(100)?;
    let pid = node.pid().context("broker pid")?;
    let rss_before_kib = procstat::status_kib(pid, "VmRSS")?;
    // 100 MB announced (socket.request.max.bytes allows it after authentication), then 2 MiB
    // of it sent: a broker that buffered toward the announced size would hold 40 MiB here.
    let mut prefixed = 104_857_600i32.to_be_bytes().to_vec();
    prefixed.extend(wire::pseudo_random_bytes(0x5a51_0001, 2 << 20));
    let mut connections = Vec::new();
    for i in 0..20 {
        let mut s = wire::connect(node.addr(), IO_TIMEOUT)?;
        if i % 2 == 1 {
            // After a v0 handshake the next frame is a bare token, capped the same way.
            handshake(&mut s, 0, "PLAIN")?;
        }
        wire::write_tolerating_close(&mut s, &prefixed)?;
        connections.push(s);
    }
    for (i, s) in connections.iter_mut().enumerate() {
        expect_silent_close(s, &format!("100 MB size prefix on connection {i}"))?;
    }
    // One byte over sasl.server.max.receive.size (512 KiB) is refused too.
    let mut s = wire::connect(node.addr(), IO_TIMEOUT)?;
    let mut over = (512 * 1024 + 1i32).to_be_bytes().to_vec();
    over.extend(wire::pseudo_random_bytes(0x5a51_0002, 4096));
    wire::write_tolerating_close(&mut s, &over)?;
    expect_silent_close(&mut s, "a frame one byte over sasl.server.max.receive.size")?;

    let rss_after_kib = procstat::status_kib(pid, "VmRSS")?;
    let grown_kib = rss_after_kib.saturating_sub(rss_before_kib);
    eprintln!("broker VmRSS {rss_before_kib} KiB before the prefixes, {rss_after_kib} KiB after");
    ensure!(
        grown_kib < 8 * 1024,
        "broker VmRSS grew {grown_kib} KiB ({rss_before_kib} -> {rss_after_kib} KiB) on 20 unauthenticated 100 MB prefixes"
    );
    still_serves(&mut node, "huge size prefixes")
}

/// How the broker took a hostile SASL step.
#[derive(Debug)]
enum Taken {
    /// An answer with this error code (and message).
    Error(i16, Option<String>),
    /// It closed the connection.
    Closed,
    /// A non-error answer: a challenge to go on with, which must not be a login.
    Continue(Vec<u8>),
}

/// Sends `frame` (a SaslAuthenticate at `version`, or any bytes) and reads how it was taken.
fn take(s: &mut TcpStream, version: i16, frame: &[u8]) -> Result<Taken> {
    if !wire::write_tolerating_close(s, frame)? {
        return Ok(Taken::Closed);
    }
    let Some(response) = frame_or_close(s)? else {
        return Ok(Taken::Closed);
    };
    let reply = wire::parse_sasl_authenticate_response(version, &response)
        .with_context(|| format!("a SaslAuthenticate v{version} response: {response:02x?}"))?;
    Ok(if reply.error_code != 0 {
        Taken::Error(reply.error_code, reply.error_message)
    } else {
        Taken::Continue(reply.auth_bytes)
    })
}

/// A SaslAuthenticate frame at `version` whose body is `body` exactly (lengths as given).
fn authenticate_frame_with_body(version: i16, body: &[u8]) -> Vec<u8> {
    wire::request_frame(
        wire::API_KEY_SASL_AUTHENTICATE,
        version,
        8,
        Some("it"),
        version >= 2,
        body,
    )
}

fn authenticate_v2(token: &[u8]) -> Vec<u8> {
    wire::sasl_authenticate_frame(2, 8, token)
}

/// A valid SCRAM-SHA-512 client-first for the admin; returns the client and the server-first.
fn scram_first(s: &mut TcpStream) -> Result<(ScramClient, Vec<u8>)> {
    handshake(s, 1, "SCRAM-SHA-512")?;
    let scram = ScramClient::new(SaslMechanism::ScramSha512, ADMIN, ADMIN_PASSWORD)?;
    let first = wire::sasl_authenticate(s, 2, scram.first_message().as_bytes(), 20)?;
    ensure!(first.error_code == 0, "client-first: {first:?}");
    Ok((scram, first.auth_bytes))
}

fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().fold(0u32, |n, b| (n << 8) | u32::from(*b)) << (8 * (3 - chunk.len()));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_sasl_payloads_get_an_error_or_a_close_and_the_broker_serves_the_next_client() -> Result<()> {
    let (mut node, _jwks) = sasl_node(20)?;
    type Case = Box<dyn Fn(&mut TcpStream) -> Result<Taken>>;
    let huge_nonce = format!("n,,n={ADMIN},r={}", "a".repeat(100_000));
    let jwt_none = format!(
        "n,,\x01auth=Bearer {}.{}.\x01\x01",
        base64url(br#"{"alg":"none","typ":"JWT"}"#),
        base64url(br#"{"sub":"admin","exp":4102444800}"#)
    );
    let cases: Vec<(&str, Case)> = vec![
        // Kafka closes: "Unexpected Kafka request of type SASL_AUTHENTICATE during SASL handshake".
        (
            "SaslAuthenticate before SaslHandshake",
            Box::new(|s| take(s, 2, &authenticate_v2(b"\0admin\0admin-secret"))),
        ),
        (
            "SaslHandshake whose mechanism declares 30000 bytes",
            Box::new(|s| {
                let mut body = Encoder::new();
                body.i16(30_000).bytes(b"PLAIN");
                let frame = wire::request_frame(wire::API_KEY_SASL_HANDSHAKE, 1, 3, Some("it"), false, &body.buf);
                take(s, 1, &frame)
            }),
        ),
        (
            "a truncated SaslAuthenticate v1 (BYTES of 1000, 3 sent)",
            Box::new(|s| {
                handshake(s, 1, "PLAIN")?;
                let mut body = Encoder::new();
                body.i32(1000).bytes(b"abc");
                take(s, 1, &authenticate_frame_with_body(1, &body.buf))
            }),
        ),
        (
            "SaslAuthenticate v1 declaring i32::MAX bytes",
            Box::new(|s| {
                handshake(s, 1, "SCRAM-SHA-512")?;
                let mut body = Encoder::new();
                body.i32(i32::MAX).bytes(&[0x41; 64]);
                take(s, 1, &authenticate_frame_with_body(1, &body.buf))
            }),
        ),
        (
            "SaslAuthenticate v1 with a negative length",
            Box::new(|s| {
                handshake(s, 1, "PLAIN")?;
                let mut body = Encoder::new();
                body.i32(-5).bytes(b"abc");
                take(s, 1, &authenticate_frame_with_body(1, &body.buf))
            }),
        ),
        (
            "SaslAuthenticate v2 declaring 2^32 compact bytes",
            Box::new(|s| {
                handshake(s, 1, "SCRAM-SHA-512")?;
                let mut body = Encoder::new();
                body.uvarint(1 << 32).bytes(&[0x41; 64]);
                take(s, 2, &authenticate_frame_with_body(2, &body.buf))
            }),
        ),
        (
            "a SaslAuthenticate of 600 KiB (over sasl.server.max.receive.size)",
            Box::new(|s| {
                handshake(s, 1, "PLAIN")?;
                take(s, 2, &authenticate_v2(&vec![b'a'; 600 * 1024]))
            }),
        ),
        (
            "an empty SCRAM client-first",
            Box::new(|s| {
                handshake(s, 1, "SCRAM-SHA-512")?;
                take(s, 2, &authenticate_v2(b""))
            }),
        ),
        (
            "a SCRAM client-first that is not UTF-8",
            Box::new(|s| {
                handshake(s, 1, "SCRAM-SHA-512")?;
                take(s, 2, &authenticate_v2(&[0xff, 0xfe, 0x80, b',', 0xc3, 0x28]))
            }),
        ),
        (
            "a SCRAM client-first without a nonce",
            Box::new(|s| {
                handshake(s, 1, "SCRAM-SHA-512")?;
                take(s, 2, &authenticate_v2(b"n,,n=admin"))
            }),
        ),
        (
            "a SCRAM client-first with a 100 KB nonce",
            Box::new(move |s| {
                handshake(s, 1, "SCRAM-SHA-512")?;
                take(s, 2, &authenticate_v2(huge_nonce.as_bytes()))
            }),
        ),
        (
            "a SCRAM client-first asking for channel binding",
            Box::new(|s| {
                handshake(s, 1, "SCRAM-SHA-512")?;
                take(s, 2, &authenticate_v2(b"p=tls-unique,,n=admin,r=abcdef"))
            }),
        ),
        (
            "a SCRAM client-first with a broken saslname escape",
            Box::new(|s| {
                handshake(s, 1, "SCRAM-SHA-512")?;
                take(s, 2, &authenticate_v2(b"n,,n=ad=mi=n,r=abcdef"))
            }),
        ),
        (
            "a SCRAM client-final that is not UTF-8",
            Box::new(|s| {
                scram_first(s)?;
                take(s, 2, &authenticate_v2(&[b'c', b'=', 0xc3, 0x28, 0xff]))
            }),
        ),
        (
            "a SCRAM client-final with a forged proof",
            Box::new(|s| {
                let (mut scram, server_first) = scram_first(s)?;
                let forged = scram.forged_final_message(&server_first, &wire::pseudo_random_bytes(0xf0_4ced, 64))?;
                take(s, 2, &authenticate_v2(forged.as_bytes()))
            }),
        ),
        (
            "a SCRAM client-final with a 10 KB proof",
            Box::new(|s| {
                let (mut scram, server_first) = scram_first(s)?;
                let forged = scram.forged_final_message(&server_first, &vec![7u8; 10_000])?;
                take(s, 2, &authenticate_v2(forged.as_bytes()))
            }),
        ),
        (
            "a SCRAM client-final with someone else's nonce",
            Box::new(|s| {
                let (mut scram, server_first) = scram_first(s)?;
                let last = scram.final_message(&server_first)?;
                let (_, proof) = last.rsplit_once(",p=").context("proof")?;
                take(
                    s,
                    2,
                    &authenticate_v2(format!("c=biws,r=another-nonce,p={proof}").as_bytes()),
                )
            }),
        ),
        (
            "a SCRAM client-final whose proof is not base64",
            Box::new(|s| {
                let (mut scram, server_first) = scram_first(s)?;
                let last = scram.final_message(&server_first)?;
                let (without_proof, _) = last.rsplit_once(",p=").context("proof")?;
                take(
                    s,
                    2,
                    &authenticate_v2(format!("{without_proof},p=!!not*base64!!").as_bytes()),
                )
            }),
        ),
        (
            "a second SaslHandshake during the SCRAM exchange",
            Box::new(|s| {
                scram_first(s)?;
                let frame = wire::request_frame(
                    wire::API_KEY_SASL_HANDSHAKE,
                    1,
                    21,
                    Some("it"),
                    false,
                    &wire::sasl_handshake_body("PLAIN"),
                );
                take(s, 1, &frame)
            }),
        ),
        (
            "a PLAIN message without separators",
            Box::new(|s| {
                handshake(s, 1, "PLAIN")?;
                take(s, 2, &authenticate_v2(b"adminadmin-secret"))
            }),
        ),
        (
            "a PLAIN message of ten NULs",
            Box::new(|s| {
                handshake(s, 1, "PLAIN")?;
                take(s, 2, &authenticate_v2(&[0u8; 10]))
            }),
        ),
        (
            "a PLAIN message that is not UTF-8",
            Box::new(|s| {
                handshake(s, 1, "PLAIN")?;
                take(s, 2, &authenticate_v2(b"\0adm\xffin\0admin-secret"))
            }),
        ),
        (
            "a PLAIN login acting for another user",
            Box::new(|s| {
                handshake(s, 1, "PLAIN")?;
                take(s, 2, &authenticate_v2(b"root\0admin\0admin-secret"))
            }),
        ),
        (
            "OAUTHBEARER random bytes",
            Box::new(|s| {
                handshake(s, 1, "OAUTHBEARER")?;
                take(s, 2, &authenticate_v2(&wire::pseudo_random_bytes(0x0a07_0001, 300)))
            }),
        ),
        (
            "an OAUTHBEARER token that is not a JWT",
            Box::new(|s| {
                handshake(s, 1, "OAUTHBEARER")?;
                take(s, 2, &authenticate_v2(b"n,,\x01auth=Bearer not.a.jwt\x01\x01"))
            }),
        ),
        (
            "an unsigned (alg none) OAUTHBEARER JWT",
            Box::new(move |s| {
                handshake(s, 1, "OAUTHBEARER")?;
                take(s, 2, &authenticate_v2(jwt_none.as_bytes()))
            }),
        ),
        (
            "an OAUTHBEARER message of 400 KiB",
            Box::new(|s| {
                handshake(s, 1, "OAUTHBEARER")?;
                let mut token = b"n,,\x01auth=Bearer ".to_vec();
                token.extend(std::iter::repeat_n(b'x', 400 * 1024));
                token.extend(b"\x01\x01");
                take(s, 2, &authenticate_v2(&token))
            }),
        ),
    ];
    let mut outcomes = Vec::new();
    for (what, case) in &cases {
        let mut s = wire::connect(node.addr(), IO_TIMEOUT)?;
        let mut taken = case(&mut s).with_context(|| what.to_string())?;
        // An OAUTHBEARER refusal is a challenge first (RFC 7628): the client acknowledges it
        // with a lone 0x01 and then gets the error.
        if let Taken::Continue(challenge) = &taken {
            ensure!(
                challenge.starts_with(b"{\"status\":"),
                "{what}: answered with success and {:?}",
                String::from_utf8_lossy(challenge)
            );
            taken = take(&mut s, 2, &authenticate_v2(b"\x01"))?;
        }
        if what.starts_with("SaslAuthenticate before SaslHandshake") {
            ensure!(
                matches!(taken, Taken::Closed),
                "{what}: taken as {taken:?}, Kafka closes the connection"
            );
        }
        match &taken {
            Taken::Closed => {}
            Taken::Error(code, _) if *code == wire::ERROR_SASL_AUTHENTICATION_FAILED => {
                // A refused login is closed after its answer.
                expect_silent_close(&mut s, &format!("{what}: after SASL_AUTHENTICATION_FAILED"))?;
            }
            Taken::Error(code, _) if *code == wire::ERROR_ILLEGAL_SASL_STATE => {}
            other => bail!("{what}: taken as {other:?}, expected an error or a close"),
        }
        still_serves(&mut node, what)?;
        // A forged proof is a plain failed login, with Kafka's message.
        if what.contains("forged proof") {
            ensure!(
                matches!(&taken, Taken::Error(code, Some(m)) if *code == wire::ERROR_SASL_AUTHENTICATION_FAILED && m == SCRAM_FAILED),
                "{what}: taken as {taken:?}, expected SASL_AUTHENTICATION_FAILED with Kafka's message"
            );
        }
        outcomes.push(format!("{what}: {taken:?}"));
    }
    eprintln!("hostile SASL payloads:\n  {}", outcomes.join("\n  "));
    let log = std::fs::read_to_string(node.log_path())?;
    ensure!(!log.contains("panicked"), "the broker log records a panic");
    Ok(())
}

/// Sends a bare token frame (after a v0 SaslHandshake) and reads the bare answer; `None` if the
/// broker closed the connection instead.
fn raw_token(s: &mut TcpStream, token: &[u8]) -> Result<Option<Vec<u8>>> {
    if !wire::write_tolerating_close(s, &wire::length_prefixed(token))? {
        return Ok(None);
    }
    frame_or_close(s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sasl_handshake_v0_client_logs_in_with_bare_plain_and_scram_tokens() -> Result<()> {
    let (mut node, _jwks) = sasl_node(50)?;
    let listed = |s: &mut TcpStream| -> Result<()> {
        let brokers = wire::metadata_brokers(s, 1, 30)?;
        ensure!(brokers.len() == 1, "Metadata after a v0 login: {brokers:?}");
        Ok(())
    };

    // PLAIN: one bare token, answered with an empty one.
    let mut s = wire::connect(node.addr(), IO_TIMEOUT)?;
    handshake(&mut s, 0, "PLAIN")?;
    let answer = raw_token(&mut s, &wire::sasl_plain_message(ADMIN, ADMIN_PASSWORD))?;
    ensure!(
        answer.as_deref() == Some(&[][..]),
        "PLAIN v0 answered {answer:?}, expected an empty token"
    );
    listed(&mut s)?;

    // SCRAM-SHA-512: server-first and server-final come back bare too.
    let mut s = wire::connect(node.addr(), IO_TIMEOUT)?;
    handshake(&mut s, 0, "SCRAM-SHA-512")?;
    let mut scram = ScramClient::new(SaslMechanism::ScramSha512, ADMIN, ADMIN_PASSWORD)?;
    let server_first = raw_token(&mut s, scram.first_message().as_bytes())?.context("closed after client-first")?;
    let last = scram.final_message(&server_first)?;
    let server_final = raw_token(&mut s, last.as_bytes())?.context("closed after client-final")?;
    scram.verify_server_final(&server_final)?;
    listed(&mut s)?;

    // v0 has no error response: a wrong password only closes the connection.
    let mut s = wire::connect(node.addr(), IO_TIMEOUT)?;
    handshake(&mut s, 0, "PLAIN")?;
    wire::write_tolerating_close(
        &mut s,
        &wire::length_prefixed(&wire::sasl_plain_message(ADMIN, "wrong")),
    )?;
    expect_silent_close(&mut s, "PLAIN v0 with a wrong password")?;
    still_serves(&mut node, "v0 logins")
}

/// A follower's Fetch, and a share-partition leader's ReadShareGroupState and
/// WriteShareGroupState, from a user without CLUSTER_ACTION, on a node with the authorizer on.
mod follower_fetch_authorization {
    use kafka_protocol::messages::create_acls_request::AclCreation;
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ReplicaState};
    use kafka_protocol::messages::{CreateAclsRequest, FetchRequest, FetchResponse, MetadataResponse};
    use sluice_integration_tests::kafka_client::{consumer_fetch_request, fetch_topic, FETCH_VERSION_BY_NAME};

    use super::*;

    const ALICE: &str = "alice";
    const ALICE_PASSWORD: &str = "alice-secret";
    const TOPIC: &str = "guarded-replica";
    const RECORDS: i64 = 3;
    const FETCH_VERSION_WITH_REPLICA_STATE: i16 = 15;
    const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
    const NOT_LEADER_OR_FOLLOWER: i16 = 6;
    // Kafka's AclOperation, ResourceType, PatternType and AclPermissionType codes.
    const READ: i8 = 3;
    const CLUSTER_ACTION: i8 = 9;
    const TOPIC_RESOURCE: i8 = 2;
    const CLUSTER_RESOURCE: i8 = 4;
    const LITERAL: i8 = 3;
    const ALLOW: i8 = 3;

    fn alice() -> ClientSecurity {
        ClientSecurity::default().sasl(SaslLogin::new(SaslMechanism::ScramSha512, ALICE, ALICE_PASSWORD))
    }

    /// Allows `principal` `operation` on a resource, as the admin.
    fn allow(node: &SluiceNode, resource_type: i8, name: &str, operation: i8) -> Result<()> {
        let request = CreateAclsRequest::default().with_creations(vec![AclCreation::default()
            .with_resource_type(resource_type)
            .with_resource_name(StrBytes::from_string(name.to_string()))
            .with_resource_pattern_type(LITERAL)
            .with_principal(StrBytes::from_static_str("User:alice"))
            .with_host(StrBytes::from_static_str("*"))
            .with_operation(operation)
            .with_permission_type(ALLOW)]);
        let response = KafkaConnection::connect_secured(node.addr(), node.client_security(), "it", IO_TIMEOUT)?
            .call(&request, 3)?;
        let code = response.results.first().context("no CreateAcls result")?.error_code;
        ensure!(code == 0, "CreateAcls {name}: error code {code}");
        Ok(())
    }

    fn metadata(node: &SluiceNode) -> Result<MetadataResponse> {
        kafka_client::metadata_secured(node.addr(), node.client_security())
    }

    /// The partition's (error code, high watermark, record bytes) in a fetch as `security`.
    fn fetch_as(
        node: &SluiceNode,
        security: &ClientSecurity,
        request: &FetchRequest,
        version: i16,
    ) -> Result<(i16, i64, usize)> {
        let response: FetchResponse =
            KafkaConnection::connect_secured(node.addr(), security, "it", IO_TIMEOUT)?.call(request, version)?;
        ensure!(
            response.error_code == 0,
            "Fetch v{version}: top-level error code {}",
            response.error_code
        );
        let p = response
            .responses
            .first()
            .and_then(|t| t.partitions.first())
            .context("fetch response without a partition")?;
        Ok((
            p.error_code,
            p.high_watermark,
            p.records.as_ref().map_or(0, |r| r.len()),
        ))
    }

    /// A follower's Fetch of partition 0 from offset 0, claiming replica 1 (this node's id): v12
    /// with `replica_id`, v15 with `ReplicaState`.
    fn follower_fetches(topic_id: uuid::Uuid) -> [(FetchRequest, i16); 2] {
        let v12 = FetchRequest::default()
            .with_replica_id(BrokerId(1))
            .with_max_bytes(i32::MAX)
            .with_topics(vec![fetch_topic(TOPIC, 0, i32::MAX)]);
        let v15 = FetchRequest::default()
            .with_replica_state(
                ReplicaState::default()
                    .with_replica_id(BrokerId(1))
                    .with_replica_epoch(-1),
            )
            .with_max_bytes(i32::MAX)
            .with_topics(vec![FetchTopic::default().with_topic_id(topic_id).with_partitions(
                vec![FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(0)
                    .with_partition_max_bytes(i32::MAX)],
            )]);
        [(v12, FETCH_VERSION_BY_NAME), (v15, FETCH_VERSION_WITH_REPLICA_STATE)]
    }

    /// A node with the authorizer on, the admin a super user, and alice with no ACL yet.
    fn start_guarded() -> Result<SluiceNode> {
        let mut opts = NodeOptions::default()
            .set("listener.security.protocol.map", "PLAINTEXT:SASL_PLAINTEXT")
            .set("sasl.enabled.mechanisms", "SCRAM-SHA-512")
            .set("authorizer.class.name", AUTHORIZER)
            .set("super.users", "User:admin")
            .client_security(ClientSecurity::default().sasl(admin(SaslMechanism::ScramSha512)));
        opts.extra_args = vec![
            "--add-scram".into(),
            ADD_ADMIN.into(),
            "--add-scram".into(),
            format!("SCRAM-SHA-512=[name={ALICE},password={ALICE_PASSWORD}]"),
        ];
        SluiceNode::start(opts)
    }

    const GROUP: &str = "guarded-share-group";
    const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;

    /// WriteShareGroupState of `GROUP`'s partition 0 of `topic_id` at start offset `start`, as
    /// `security`: the partition's error code.
    fn write_state(node: &SluiceNode, security: &ClientSecurity, topic_id: uuid::Uuid, start: i64) -> Result<i16> {
        use kafka_protocol::messages::write_share_group_state_request::{PartitionData, WriteStateData};
        use kafka_protocol::messages::{WriteShareGroupStateRequest, WriteShareGroupStateResponse};
        let request = WriteShareGroupStateRequest::default()
            .with_group_id(StrBytes::from_static_str(GROUP))
            .with_topics(vec![WriteStateData::default().with_topic_id(topic_id).with_partitions(
                vec![PartitionData::default()
                    .with_partition(0)
                    .with_state_epoch(0)
                    .with_leader_epoch(0)
                    .with_start_offset(start)],
            )]);
        let response: WriteShareGroupStateResponse =
            KafkaConnection::connect_secured(node.addr(), security, "it", IO_TIMEOUT)?.call(&request, 0)?;
        response
            .results
            .first()
            .and_then(|t| t.partitions.first())
            .map(|p| p.error_code)
            .context("WriteShareGroupState answer without the partition")
    }

    /// ReadShareGroupState of the same, as `security`: (error code, start offset).
    fn read_state(node: &SluiceNode, security: &ClientSecurity, topic_id: uuid::Uuid) -> Result<(i16, i64)> {
        use kafka_protocol::messages::read_share_group_state_request::{PartitionData, ReadStateData};
        use kafka_protocol::messages::{ReadShareGroupStateRequest, ReadShareGroupStateResponse};
        let request = ReadShareGroupStateRequest::default()
            .with_group_id(StrBytes::from_static_str(GROUP))
            .with_topics(vec![ReadStateData::default().with_topic_id(topic_id).with_partitions(
                vec![PartitionData::default().with_partition(0).with_leader_epoch(0)],
            )]);
        let response: ReadShareGroupStateResponse =
            KafkaConnection::connect_secured(node.addr(), security, "it", IO_TIMEOUT)?.call(&request, 0)?;
        response
            .results
            .first()
            .and_then(|t| t.partitions.first())
            .map(|p| (p.error_code, p.start_offset))
            .context("ReadShareGroupState answer without the partition")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn share_state_reads_and_writes_without_cluster_action_are_refused_and_store_nothing() -> Result<()> {
        use kafka_protocol::messages::FindCoordinatorRequest;
        let mut node = start_guarded()?;
        create_topic(&node, TOPIC)?;
        let topic_id = metadata(&node)?
            .topics
            .iter()
            .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == TOPIC))
            .map(|t| t.topic_id)
            .context("the topic is not in metadata")?;
        // The group's coordinator exists once __consumer_offsets does (FindCoordinator makes it).
        let find = FindCoordinatorRequest::default()
            .with_key_type(0)
            .with_coordinator_keys(vec![StrBytes::from_static_str(GROUP)]);
        KafkaConnection::connect_secured(node.addr(), node.client_security(), "it", IO_TIMEOUT)?.call(&find, 4)?;
        let admin = node.client_security().clone();
        wait_until(TIMEOUT, "the group's coordinator to load", || {
            read_state(&node, &admin, topic_id).ok().filter(|r| r.0 == 0)
        })?;

        let refused = (
            write_state(&node, &alice(), topic_id, 2)?,
            read_state(&node, &alice(), topic_id)?.0,
        );
        ensure!(
            refused == (CLUSTER_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED),
            "alice's write and read without CLUSTER_ACTION: error codes {refused:?}"
        );
        ensure!(
            read_state(&node, &admin, topic_id)? == (0, -1),
            "alice's refused write stored a state"
        );

        allow(&node, CLUSTER_RESOURCE, "kafka-cluster", CLUSTER_ACTION)?;
        wait_until(TIMEOUT, "alice's CLUSTER_ACTION to apply", || {
            write_state(&node, &alice(), topic_id, 2).ok().filter(|code| *code == 0)
        })?;
        let read = read_state(&node, &alice(), topic_id)?;
        ensure!(
            read == (0, 2),
            "alice reads back {read:?}, not the start offset 2 she wrote"
        );
        still_serves(&mut node, "share state requests from a user")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_follower_fetch_without_cluster_action_is_refused_per_partition_and_changes_nothing() -> Result<()> {
        let mut node = start_guarded()?;
        create_topic(&node, TOPIC)?;
        let records: Vec<_> = (0..RECORDS)
            .map(|_| wire::RawRecord {
                key: None,
                value: Some(b"replicated"),
            })
            .collect();
        let batch = wire::record_batch_v2(clients::now_ms(), &records);
        let mut s = node.connect(IO_TIMEOUT)?;
        s.write_all(&wire::request_frame(
            wire::API_KEY_PRODUCE,
            3,
            1,
            Some("it"),
            false,
            &wire::produce_body_v3(-1, 5000, TOPIC, 0, &batch),
        ))?;
        let (_, _, _, code, _) = wire::parse_produce_response_first_partition(&wire::read_frame(&mut s)?)?;
        ensure!(code == 0, "produce as the admin: error code {code}");
        let topic_id = metadata(&node)?
            .topics
            .iter()
            .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == TOPIC))
            .map(|t| t.topic_id)
            .context("the topic is not in metadata")?;

        // READ on the topic: alice reads as a consumer.
        allow(&node, TOPIC_RESOURCE, TOPIC, READ)?;
        let consumer = consumer_fetch_request(TOPIC, 0, 0);
        let read = wait_until(TIMEOUT, "alice's READ to apply", || {
            fetch_as(&node, &alice(), &consumer, FETCH_VERSION_BY_NAME)
                .ok()
                .filter(|r| r.0 == 0)
        })?;
        ensure!(read.1 == RECORDS && read.2 > 0, "alice's consumer fetch: {read:?}");

        // As a follower she is refused per partition, with nothing read, before the replica
        // identity check (which would answer NOT_LEADER_OR_FOLLOWER).
        for (request, version) in follower_fetches(topic_id) {
            let answer = fetch_as(&node, &alice(), &request, version)?;
            ensure!(
                answer == (TOPIC_AUTHORIZATION_FAILED, -1, 0),
                "alice's follower Fetch v{version}: (error code, HW, record bytes) {answer:?}"
            );
        }
        ensure!(log_end_offset(&node, TOPIC)? == RECORDS, "the log end moved");
        let partition = metadata(&node)?
            .topics
            .into_iter()
            .find(|t| t.topic_id == topic_id)
            .and_then(|t| t.partitions.into_iter().next())
            .context("partition 0 in metadata")?;
        ensure!(
            partition.leader_id == BrokerId(1) && partition.isr_nodes == [BrokerId(1)],
            "leader {:?}, ISR {:?} after the refused fetches",
            partition.leader_id,
            partition.isr_nodes
        );
        let after = fetch_as(&node, &alice(), &consumer, FETCH_VERSION_BY_NAME)?;
        ensure!(
            after.0 == 0 && after.1 == RECORDS,
            "alice's consumer fetch after: {after:?}"
        );

        // With CLUSTER_ACTION the same claims pass the authorizer and meet the identity check.
        allow(&node, CLUSTER_RESOURCE, "kafka-cluster", CLUSTER_ACTION)?;
        for (request, version) in follower_fetches(topic_id) {
            let answer = wait_until(TIMEOUT, "alice's CLUSTER_ACTION to apply", || {
                fetch_as(&node, &alice(), &request, version)
                    .ok()
                    .filter(|a| a.0 != TOPIC_AUTHORIZATION_FAILED)
            })?;
            ensure!(
                answer.0 == NOT_LEADER_OR_FOLLOWER,
                "alice's follower Fetch v{version} with CLUSTER_ACTION: {answer:?}"
            );
        }
        still_serves(&mut node, "follower fetches from a user")
    }
}

#[test]
fn the_sluice_client_commands_log_in_from_a_command_config_and_a_wrong_password_is_refused() -> Result<()> {
    let pki = Pki::new()?;
    let security = ClientSecurity::default()
        .tls(pki.client(false))
        .sasl(admin(SaslMechanism::ScramSha512));
    let mut settings = pki.broker_settings();
    settings.extend(owned(&[
        ("sasl.enabled.mechanisms", "SCRAM-SHA-512"),
        ("authorizer.class.name", AUTHORIZER),
        ("super.users", "User:admin"),
    ]));
    let cluster = start_cluster(1, &settings, Some("SASL_SSL"), &security)?;
    let dir = TempDir::new()?;
    // Kafka's own tools read the same file (`kafka-topics.sh --command-config`).
    let properties = |password: &str| -> Result<std::path::PathBuf> {
        let path = dir.path().join(format!("client-{password}.properties"));
        std::fs::write(
            &path,
            format!(
                "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nssl.ca.location={}\n\
                 sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"{ADMIN}\" password=\"{password}\";\n",
                pki.ca.display()
            ),
        )?;
        Ok(path)
    };
    let sluice = |config: &std::path::Path, args: &[&str]| -> Result<std::process::Output> {
        Ok(std::process::Command::new(sluice_integration_tests::sluice_binary()?)
            .args(args)
            .arg("--bootstrap")
            .arg(cluster.addr(1).to_string())
            .arg("--command-config")
            .arg(config)
            .output()?)
    };
    let good = properties(ADMIN_PASSWORD)?;
    let created = sluice(&good, &["topic", "create", "cli-secured", "-p", "1", "-r", "1"])?;
    ensure!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    let listed = sluice(&good, &["topic", "list", "--format", "json"])?;
    ensure!(
        listed.status.success() && String::from_utf8_lossy(&listed.stdout).contains("\"cli-secured\""),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );

    let wrong = properties("not-the-password")?;
    let refused = sluice(&wrong, &["topic", "list"])?;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    ensure!(!refused.status.success(), "a wrong password listed topics");
    ensure!(
        stderr.contains(SCRAM_FAILED) && stderr.contains("--command-config"),
        "{stderr}"
    );
    ensure!(
        !stderr.contains("not-the-password"),
        "the password was echoed: {stderr}"
    );

    // Without TLS settings the client speaks plaintext to a TLS listener and gets nowhere.
    let plain = dir.path().join("plain.properties");
    std::fs::write(&plain, "security.protocol=PLAINTEXT\n")?;
    let refused = sluice(&plain, &["topic", "list", "--timeout-ms", "3000"])?;
    ensure!(
        !refused.status.success(),
        "a plaintext client was served by a SASL_SSL listener"
    );
    Ok(())
}

#[test]
fn the_sluice_client_commands_present_a_client_certificate_where_the_listener_requires_one() -> Result<()> {
    let pki = Pki::new()?;
    let security = ClientSecurity::default().tls(pki.client(true));
    let mut settings = pki.broker_settings();
    settings.extend(owned(&[("ssl.client.auth", "required")]));
    let cluster = start_cluster(1, &settings, Some("SSL"), &security)?;
    let dir = TempDir::new()?;
    let config = |name: &str, lines: &str| -> Result<std::path::PathBuf> {
        let path = dir.path().join(name);
        std::fs::write(
            &path,
            format!("security.protocol=SSL\nssl.ca.location={}\n{lines}", pki.ca.display()),
        )?;
        Ok(path)
    };
    let list = |config: &std::path::Path| -> Result<std::process::Output> {
        Ok(std::process::Command::new(sluice_integration_tests::sluice_binary()?)
            .args([
                "topic",
                "list",
                "--format",
                "json",
                "--timeout-ms",
                "5000",
                "--bootstrap",
            ])
            .arg(cluster.addr(1).to_string())
            .arg("--command-config")
            .arg(config)
            .output()?)
    };
    let with_certificate = config(
        "mtls.properties",
        &format!(
            "ssl.certificate.location={}\nssl.key.location={}\n",
            pki.client_certificate.display(),
            pki.client_key.display()
        ),
    )?;
    let listed = list(&with_certificate)?;
    ensure!(
        listed.status.success(),
        "with a client certificate: {}",
        String::from_utf8_lossy(&listed.stderr)
    );

    // Without one the listener answers nothing; half a pair is a usage error naming both.
    let refused = list(&config("no-certificate.properties", "")?)?;
    ensure!(
        !refused.status.success(),
        "a client without a certificate listed topics"
    );
    let half = list(&config(
        "half.properties",
        &format!("ssl.certificate.location={}\n", pki.client_certificate.display()),
    )?)?;
    let stderr = String::from_utf8_lossy(&half.stderr);
    ensure!(
        !half.status.success() && stderr.contains("ssl.key.location"),
        "a certificate without its key: {stderr}"
    );
    Ok(())
}
