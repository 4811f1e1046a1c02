//! The security rows: each logs in to a secured listener as the `--security` file says
//! (compat/README.md), with librdkafka's settings (built with the `ssl` feature): TLS with the
//! test CA (and a client certificate for mutual TLS), SASL PLAIN and SCRAM with a user and
//! password, OAUTHBEARER with the file's signed token, given by the application as librdkafka
//! expects (it makes only unsigned tokens itself).

use std::ffi::CString;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use rdkafka::admin::{AdminClient, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, OAuthToken};
use rdkafka::config::{ClientConfig, FromClientConfigAndContext};
use rdkafka::consumer::{CommitMode, Consumer, ConsumerContext, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, DeliveryResult, FutureProducer, FutureRecord, Producer, ProducerContext};
use rdkafka::TopicPartitionList;
use serde_json::Value;

use crate::client::{admin_options, CALL};
use crate::Opts;

const RECORDS: usize = 50;
const AUTHENTICATION_FAILED: &str = "Authentication failed";

/// One --security entry: where the row connects and how it logs in.
struct Login<'a>(&'a Value);

impl Login<'_> {
    fn get(&self, field: &str) -> Option<&str> {
        self.0.get(field).and_then(Value::as_str)
    }

    /// librdkafka's settings for this login, with the bootstrap list.
    fn config(&self, settings: &[(&str, &str)]) -> Result<ClientConfig> {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", self.get("bootstrap").context("no bootstrap")?);
        c.set(
            "security.protocol",
            self.get("security_protocol").context("no security_protocol")?,
        );
        if let Some(ca) = self.get("ca") {
            c.set("ssl.ca.location", ca);
        }
        if let (Some(cert), Some(key)) = (self.get("client_cert"), self.get("client_key")) {
            c.set("ssl.certificate.location", cert).set("ssl.key.location", key);
        }
        if let Some(mechanism) = self.get("sasl_mechanism") {
            c.set("sasl.mechanism", mechanism);
            if mechanism != "OAUTHBEARER" {
                c.set("sasl.username", self.get("username").context("no username")?);
                c.set("sasl.password", self.get("password").context("no password")?);
            }
        }
        if let Ok(debug) = std::env::var("COMPAT_RDKAFKA_DEBUG") {
            c.set("debug", debug);
        }
        for (k, v) in settings {
            c.set(*k, *v);
        }
        Ok(c)
    }

    fn context(&self) -> SecureContext {
        let token = match (
            self.get("token"),
            self.get("token_principal"),
            self.0.get("token_expires_ms"),
        ) {
            (Some(t), Some(p), Some(exp)) => Some(Arc::new((t.to_owned(), p.to_owned(), exp.as_i64().unwrap_or(0)))),
            _ => None,
        };
        SecureContext {
            token,
            errors: Arc::default(),
        }
    }
}

/// The OAUTHBEARER token (token, principal, expiry in ms since the epoch), handed to librdkafka
/// when it asks for one, and the errors the client reports.
#[derive(Clone)]
struct SecureContext {
    token: Option<Arc<(String, String, i64)>>,
    errors: Arc<Mutex<Vec<String>>>,
}

impl ClientContext for SecureContext {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn generate_oauth_token(&self, _config: Option<&str>) -> Result<OAuthToken, Box<dyn std::error::Error>> {
        let (token, principal_name, lifetime_ms) = self.token.as_deref().ok_or("the --security login has no token")?;
        Ok(OAuthToken {
            token: token.clone(),
            principal_name: principal_name.clone(),
            lifetime_ms: *lifetime_ms,
        })
    }

    fn error(&self, error: KafkaError, reason: &str) {
        eprintln!("[rdkafka-rust] client error: {error}: {reason}");
        self.errors.lock().unwrap().push(format!("{error}: {reason}"));
    }
}

impl ConsumerContext for SecureContext {}

/// For the wrong-password row's BaseProducer, which only polls (no records, no deliveries).
impl ProducerContext for SecureContext {
    type DeliveryOpaque = ();

    fn delivery(&self, _: &DeliveryResult<'_>, _: ()) {}
}

/// rust-rdkafka's AdminClient polls only its own result queue, never the one librdkafka asks
/// for a token on: the token is set on the admin client directly.
fn set_token(admin: &AdminClient<SecureContext>, ctx: &SecureContext) -> Result<()> {
    let Some(t) = ctx.token.as_deref() else { return Ok(()) };
    let (token, principal) = (CString::new(t.0.as_str())?, CString::new(t.1.as_str())?);
    let mut err = [0 as std::os::raw::c_char; 512];
    let code = unsafe {
        rdkafka::bindings::rd_kafka_oauthbearer_set_token(
            admin.inner().native_ptr(),
            token.as_ptr(),
            t.2,
            principal.as_ptr(),
            std::ptr::null_mut(),
            0,
            err.as_mut_ptr(),
            err.len(),
        )
    };
    if code != rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        let msg = unsafe { std::ffi::CStr::from_ptr(err.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        bail!("setting the OAUTHBEARER token: {code:?}: {msg}");
    }
    Ok(())
}

fn login<'a>(opts: &'a Opts, scenario: &str) -> Result<Login<'a>> {
    match opts.security.get("scenarios").and_then(|s| s.get(scenario)) {
        Some(entry) => Ok(Login(entry)),
        None => bail!(
            "the --security file has no login for {scenario}{}",
            opts.security
                .get("error")
                .and_then(Value::as_str)
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        ),
    }
}

fn create<T: FromClientConfigAndContext<SecureContext>>(
    l: &Login,
    ctx: &SecureContext,
    settings: &[(&str, &str)],
) -> Result<T> {
    l.config(settings)?
        .create_with_context(ctx.clone())
        .context("cannot create the client")
}

/// Create a topic (AdminClient), produce 50 values with acks=all, read them all in a group,
/// commit, and read the committed offset back, every client logged in as the row says.
pub async fn round_trip(opts: &Opts, scenario: &str) -> Result<String> {
    let l = login(opts, scenario)?;
    let ctx = l.context();
    let topic = format!("{}{}", opts.prefix, scenario.replace('_', "-"));

    let admin: AdminClient<SecureContext> = create(&l, &ctx, &[])?;
    set_token(&admin, &ctx)?;
    let new = NewTopic::new(&topic, 1, TopicReplication::Fixed(opts.brokers as i32));
    match admin
        .create_topics([&new], &admin_options())
        .await
        .context("create topics")?
        .as_slice()
    {
        [Ok(_)] => {}
        other => bail!("create topic {topic}: {other:?}"),
    }
    await_leader(&admin, &topic).await?;

    let values: Vec<String> = (0..RECORDS).map(|i| format!("{topic}-{i}")).collect();
    let producer: FutureProducer<SecureContext> = create(&l, &ctx, &[("acks", "all")])?;
    let mut deliveries = Vec::new();
    for v in &values {
        let record = FutureRecord::<(), _>::to(&topic).partition(0).payload(v);
        deliveries.push(
            producer
                .send_result(record)
                .map_err(|(e, _)| e)
                .context("enqueue a record")?,
        );
    }
    for (i, d) in deliveries.into_iter().enumerate() {
        d.await
            .context("producer dropped a delivery report")?
            .map_err(|(e, _)| e)
            .with_context(|| format!("delivery of record {i}"))?;
    }

    let group = format!("{}{scenario}-group", opts.prefix);
    let consumer: StreamConsumer<SecureContext> = create(
        &l,
        &ctx,
        &[
            ("group.id", &group),
            ("auto.offset.reset", "earliest"),
            ("enable.auto.commit", "false"),
        ],
    )?;
    consumer.subscribe(&[&topic]).context("subscribe")?;
    let outcome = read_and_commit(&consumer, &topic, &values).await;
    tokio::task::spawn_blocking(move || drop(consumer))
        .await
        .context("closing the consumer panicked")?;
    outcome?;
    Ok(String::new())
}

async fn await_leader(admin: &AdminClient<SecureContext>, topic: &str) -> Result<()> {
    let mut last = String::new();
    for _ in 0..100 {
        let md = admin.inner().fetch_metadata(Some(topic), CALL).context("metadata")?;
        match md
            .topics()
            .first()
            .map(|t| (t.error(), t.partitions().first().map(|p| p.leader())))
        {
            Some((None, Some(leader))) if leader >= 0 => return Ok(()),
            other => last = format!("{other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("{topic} never had a leader (last: {last})")
}

async fn read_and_commit(c: &StreamConsumer<SecureContext>, topic: &str, values: &[String]) -> Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(25);
    let mut got = Vec::new();
    while got.len() < values.len() {
        match tokio::time::timeout_at(deadline, c.recv()).await {
            Err(_) => bail!("received {} of {} records", got.len(), values.len()),
            Ok(Err(e)) => bail!("consumer error after {} records: {e}", got.len()),
            Ok(Ok(m)) => got.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned()),
        }
    }
    for (i, (s, g)) in values.iter().zip(&got).enumerate() {
        ensure!(s == g, "record {i} read back as {g:?}, sent {s:?}");
    }
    c.commit_consumer_state(CommitMode::Sync).context("commit")?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, 0);
    let committed = c.committed_offsets(tpl, CALL).context("committed offsets")?;
    let at = committed.find_partition(topic, 0).map(|p| p.offset());
    ensure!(
        at == Some(rdkafka::Offset::Offset(values.len() as i64)),
        "committed {at:?}, want offset {}",
        values.len()
    );
    Ok(())
}

/// A SCRAM-SHA-512 login with a wrong password: librdkafka's error callback must report the
/// broker's SASL_AUTHENTICATION_FAILED, and no metadata request may succeed.
pub async fn wrong_password(opts: &Opts) -> Result<String> {
    let l = login(opts, "sasl_wrong_password")?;
    let ctx = l.context();
    let producer: BaseProducer<SecureContext> = create(&l, &ctx, &[])?;
    let errors = ctx.errors.clone();
    tokio::task::spawn_blocking(move || -> Result<String> {
        // The client connects as it is created; its error callback reports the refusal at once.
        let mut first = None;
        for _ in 0..300 {
            producer.poll(Duration::from_millis(100)); // serves the error callback
            first = errors.lock().unwrap().first().cloned();
            if first.is_some() {
                break;
            }
        }
        let first = first.context("no error reported by the client in 30s")?;
        ensure!(
            first.contains(AUTHENTICATION_FAILED),
            "expected {AUTHENTICATION_FAILED:?}, the client reported: {first}"
        );
        if producer.client().fetch_metadata(None, Duration::from_secs(1)).is_ok() {
            bail!("a metadata request succeeded with a wrong password");
        }
        // Shorter for the table: from librdkafka's "SASL authentication error", without the
        // broker's address before it and the timing after it.
        let short = first
            .find("SASL authentication error")
            .map_or(first.as_str(), |i| &first[i..]);
        Ok(short.split(" (after ").next().unwrap_or(short).to_owned())
    })
    .await
    .context("the wrong-password check panicked")?
}
