//! Hand-encoded Kafka wire messages for tests that must control every byte.
//!
//! Deliberately independent of the `kafka-protocol` crate the broker uses: if the broker and a
//! test shared one codec, a codec bug would go unnoticed. Only the few messages the raw-socket
//! tests need are here, written straight from the Kafka protocol guide.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};

pub const API_KEY_PRODUCE: i16 = 0;
pub const API_KEY_METADATA: i16 = 3;
pub const API_KEY_SASL_HANDSHAKE: i16 = 17;
pub const API_KEY_API_VERSIONS: i16 = 18;
pub const API_KEY_SASL_AUTHENTICATE: i16 = 36;

pub const ERROR_NONE: i16 = 0;
pub const ERROR_CORRUPT_MESSAGE: i16 = 2;
pub const ERROR_UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
pub const ERROR_UNSUPPORTED_SASL_MECHANISM: i16 = 33;
pub const ERROR_ILLEGAL_SASL_STATE: i16 = 34;
pub const ERROR_UNSUPPORTED_VERSION: i16 = 35;
pub const ERROR_SASL_AUTHENTICATION_FAILED: i16 = 58;

/// Big-endian encoder for the primitive types of the Kafka protocol.
#[derive(Default, Debug, Clone)]
pub struct Encoder {
    pub buf: Vec<u8>,
}

impl Encoder {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn i8(&mut self, v: i8) -> &mut Self {
        self.buf.push(v as u8);
        self
    }
    pub fn i16(&mut self, v: i16) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn i32(&mut self, v: i32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(v);
        self
    }
    /// STRING: i16 length + UTF-8 bytes.
    pub fn string(&mut self, v: &str) -> &mut Self {
        self.i16(i16::try_from(v.len()).expect("string too long"))
            .bytes(v.as_bytes())
    }
    /// NULLABLE_STRING: like STRING, -1 for null.
    pub fn nullable_string(&mut self, v: Option<&str>) -> &mut Self {
        match v {
            Some(s) => self.string(s),
            None => self.i16(-1),
        }
    }
    /// UNSIGNED_VARINT (used by flexible versions for lengths and tag counts).
    pub fn uvarint(&mut self, mut v: u64) -> &mut Self {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
        self
    }
    /// VARINT/VARLONG: zig-zag encoded (used inside v2 records).
    pub fn varlong(&mut self, v: i64) -> &mut Self {
        self.uvarint(((v << 1) ^ (v >> 63)) as u64)
    }
    /// COMPACT_STRING: uvarint(len + 1) + bytes.
    pub fn compact_string(&mut self, v: &str) -> &mut Self {
        self.uvarint(v.len() as u64 + 1).bytes(v.as_bytes())
    }
    /// BYTES: i32 length + bytes.
    pub fn sized_bytes(&mut self, v: &[u8]) -> &mut Self {
        self.i32(i32::try_from(v.len()).expect("bytes too long")).bytes(v)
    }
    /// COMPACT_BYTES: uvarint(len + 1) + bytes.
    pub fn compact_bytes(&mut self, v: &[u8]) -> &mut Self {
        self.uvarint(v.len() as u64 + 1).bytes(v)
    }
}

/// Big-endian decoder that fails (never panics) on truncated input.
#[derive(Debug)]
pub struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Decoder<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    pub fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        ensure!(
            self.remaining() >= n,
            "truncated: need {n} bytes at {}, have {}",
            self.pos,
            self.remaining()
        );
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    pub fn i16(&mut self) -> Result<i16> {
        Ok(i16::from_be_bytes(self.take(2)?.try_into()?))
    }
    pub fn i32(&mut self) -> Result<i32> {
        Ok(i32::from_be_bytes(self.take(4)?.try_into()?))
    }
    pub fn i64(&mut self) -> Result<i64> {
        Ok(i64::from_be_bytes(self.take(8)?.try_into()?))
    }
    pub fn string(&mut self) -> Result<String> {
        let len = self.i16()?;
        ensure!(len >= 0, "unexpected null string");
        Ok(String::from_utf8(self.take(len as usize)?.to_vec())?)
    }
    pub fn nullable_string(&mut self) -> Result<Option<String>> {
        let len = self.i16()?;
        if len < 0 {
            return Ok(None);
        }
        Ok(Some(String::from_utf8(self.take(len as usize)?.to_vec())?))
    }
    /// BYTES: i32 length + bytes (null, -1, read as empty).
    pub fn sized_bytes(&mut self) -> Result<Vec<u8>> {
        let len = self.i32()?;
        Ok(if len < 0 {
            Vec::new()
        } else {
            self.take(len as usize)?.to_vec()
        })
    }
    pub fn uvarint(&mut self) -> Result<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.take(1)?[0];
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        bail!("unsigned varint longer than 10 bytes")
    }
    /// COMPACT_NULLABLE_STRING: uvarint(len + 1), 0 for null.
    pub fn compact_nullable_string(&mut self) -> Result<Option<String>> {
        match self.uvarint()? {
            0 => Ok(None),
            n => Ok(Some(String::from_utf8(self.take(n as usize - 1)?.to_vec())?)),
        }
    }
    /// COMPACT_BYTES: uvarint(len + 1) (null, 0, read as empty).
    pub fn compact_bytes(&mut self) -> Result<Vec<u8>> {
        match self.uvarint()? {
            0 => Ok(Vec::new()),
            n => Ok(self.take(n as usize - 1)?.to_vec()),
        }
    }
    /// Skips a tagged-field section (flexible versions).
    pub fn tagged_fields(&mut self) -> Result<()> {
        for _ in 0..self.uvarint()? {
            self.uvarint()?; // tag
            let len = self.uvarint()?;
            self.take(len as usize)?;
        }
        Ok(())
    }
}

/// Builds a complete, length-prefixed request with a v1 request header (api key, version,
/// correlation id, nullable client id). `flexible` appends the empty tagged-field section of a v2
/// header, as clients do for flexible API versions.
pub fn request_frame(
    api_key: i16,
    api_version: i16,
    correlation_id: i32,
    client_id: Option<&str>,
    flexible: bool,
    body: &[u8],
) -> Vec<u8> {
    let mut msg = Encoder::new();
    msg.i16(api_key)
        .i16(api_version)
        .i32(correlation_id)
        .nullable_string(client_id);
    if flexible {
        msg.uvarint(0);
    }
    msg.bytes(body);
    length_prefixed(&msg.buf)
}

/// Prefixes `payload` with its i32 length, as every Kafka frame is.
pub fn length_prefixed(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 4);
    out.extend_from_slice(&(payload.len() as i32).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// Connects to the broker with read/write timeouts so that no test can block forever.
pub fn connect(addr: SocketAddr, io_timeout: Duration) -> Result<TcpStream> {
    let stream = TcpStream::connect_timeout(&addr, io_timeout).with_context(|| format!("connect to {addr}"))?;
    stream.set_read_timeout(Some(io_timeout))?;
    stream.set_write_timeout(Some(io_timeout))?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Reads one length-prefixed response frame (without the prefix).
pub fn read_frame(stream: &mut impl Read) -> Result<Vec<u8>> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).context("read response length")?;
    let len = i32::from_be_bytes(len);
    ensure!((0..=64 << 20).contains(&len), "implausible response length {len}");
    let mut frame = vec![0u8; len as usize];
    stream.read_exact(&mut frame).context("read response body")?;
    Ok(frame)
}

/// How a connection ended while we waited for the broker to close it.
#[derive(Debug)]
pub struct Closed {
    /// Bytes the broker sent before closing (an error response is acceptable for some inputs).
    pub received: Vec<u8>,
    pub after: Duration,
}

/// Waits until the broker closes `stream` (EOF or reset), reading and keeping whatever it sends.
/// Fails if the connection is still open at the deadline.
pub fn await_close_by_broker(stream: &mut TcpStream, timeout: Duration) -> Result<Closed> {
    let start = Instant::now();
    let deadline = start + timeout;
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let now = Instant::now();
        if now >= deadline {
            bail!(
                "broker kept the connection open for {timeout:?} (received {} bytes: {:02x?})",
                received.len(),
                &received[..received.len().min(64)]
            );
        }
        stream.set_read_timeout(Some((deadline - now).max(Duration::from_millis(1))))?;
        match stream.read(&mut buf) {
            Ok(0) => {
                return Ok(Closed {
                    received,
                    after: start.elapsed(),
                })
            }
            Ok(n) => received.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted | io::ErrorKind::BrokenPipe
                ) =>
            {
                return Ok(Closed {
                    received,
                    after: start.elapsed(),
                })
            }
            Err(e) => return Err(e).context("reading while awaiting close"),
        }
    }
}

/// Writes `bytes`, tolerating the broker closing the socket part-way (that is a legitimate
/// reaction to hostile input). Returns whether everything was written.
pub fn write_tolerating_close(stream: &mut TcpStream, bytes: &[u8]) -> Result<bool> {
    match stream.write_all(bytes).and_then(|_| stream.flush()) {
        Ok(()) => Ok(true),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionAborted
            ) =>
        {
            Ok(false)
        }
        Err(e) => Err(e).context("write"),
    }
}

/// One entry of an ApiVersions response: (api key, min version, max version).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiRange {
    pub api_key: i16,
    pub min_version: i16,
    pub max_version: i16,
}

/// An ApiVersions response decoded as version 0 (header v0: correlation id only).
#[derive(Debug)]
pub struct ApiVersionsV0 {
    pub correlation_id: i32,
    pub error_code: i16,
    pub apis: Vec<ApiRange>,
}

impl ApiVersionsV0 {
    pub fn range(&self, api_key: i16) -> Option<ApiRange> {
        self.apis.iter().copied().find(|a| a.api_key == api_key)
    }
}

/// ApiVersions request body for versions 3+ (client software name and version, tagged fields).
pub fn api_versions_v3_body() -> Vec<u8> {
    let mut body = Encoder::new();
    body.compact_string("sluice-integration-tests")
        .compact_string("0.1.0")
        .uvarint(0);
    body.buf
}

/// Decodes a response frame strictly as ApiVersions v0: every byte must be accounted for, so a
/// reply encoded in another version (e.g. compact arrays) fails here.
pub fn parse_api_versions_v0(frame: &[u8]) -> Result<ApiVersionsV0> {
    let mut d = Decoder::new(frame);
    let correlation_id = d.i32()?;
    let error_code = d.i16()?;
    let n = d.i32()?;
    ensure!((0..=1000).contains(&n), "implausible api array length {n}");
    let mut apis = Vec::with_capacity(n as usize);
    for _ in 0..n {
        apis.push(ApiRange {
            api_key: d.i16()?,
            min_version: d.i16()?,
            max_version: d.i16()?,
        });
    }
    ensure!(
        d.remaining() == 0,
        "{} trailing bytes after a v0 ApiVersions body (was it encoded as another version?)",
        d.remaining()
    );
    Ok(ApiVersionsV0 {
        correlation_id,
        error_code,
        apis,
    })
}

/// Sends ApiVersions v0 on `stream` and decodes the answer.
pub fn api_versions_v0<S: Read + Write>(stream: &mut S, correlation_id: i32) -> Result<ApiVersionsV0> {
    let req = request_frame(API_KEY_API_VERSIONS, 0, correlation_id, Some("it"), false, &[]);
    stream.write_all(&req).context("send ApiVersions v0")?;
    let resp = parse_api_versions_v0(&read_frame(stream)?)?;
    ensure!(
        resp.correlation_id == correlation_id,
        "correlation id {} != {correlation_id}",
        resp.correlation_id
    );
    Ok(resp)
}

/// A broker entry of a Metadata response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataBroker {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
}

/// Sends a brokers-only Metadata request (empty topic list) at `version` (1..=8, the
/// non-flexible versions) and returns the brokers listed in the response.
pub fn metadata_brokers<S: Read + Write>(
    stream: &mut S,
    version: i16,
    correlation_id: i32,
) -> Result<Vec<MetadataBroker>> {
    ensure!(
        (1..=8).contains(&version),
        "metadata_brokers speaks Metadata v1..=8, not v{version}"
    );
    let mut body = Encoder::new();
    body.i32(0); // no topics: brokers only
    if version >= 4 {
        body.i8(0); // allow_auto_topic_creation
    }
    if version >= 8 {
        body.i8(0).i8(0); // include cluster / topic authorized operations
    }
    let req = request_frame(API_KEY_METADATA, version, correlation_id, Some("it"), false, &body.buf);
    stream.write_all(&req).context("send Metadata")?;
    let frame = read_frame(stream)?;
    let mut d = Decoder::new(&frame);
    let corr = d.i32()?;
    ensure!(
        corr == correlation_id,
        "Metadata correlation id {corr} != {correlation_id}"
    );
    if version >= 3 {
        d.i32()?; // throttle_time_ms
    }
    let n = d.i32()?;
    ensure!((0..=10_000).contains(&n), "implausible broker count {n}");
    let mut brokers = Vec::new();
    for _ in 0..n {
        let node_id = d.i32()?;
        let host = d.string()?;
        let port = d.i32()?;
        let rack_len = d.i16()?; // rack: nullable string (v1+)
        if rack_len > 0 {
            d.take(rack_len as usize)?;
        }
        brokers.push(MetadataBroker { node_id, host, port });
    }
    Ok(brokers)
}

/// A SaslHandshake response (v0 and v1 share it; header v0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaslHandshakeReply {
    pub correlation_id: i32,
    pub error_code: i16,
    /// The mechanisms the listener enables.
    pub mechanisms: Vec<String>,
}

/// The SaslHandshake request body (v0 and v1): the mechanism asked for. With v0 the SASL
/// tokens that follow are bare size-prefixed frames; with v1 they are SaslAuthenticate requests.
pub fn sasl_handshake_body(mechanism: &str) -> Vec<u8> {
    let mut body = Encoder::new();
    body.string(mechanism);
    body.buf
}

/// Decodes a SaslHandshake response, every byte accounted for.
pub fn parse_sasl_handshake_response(frame: &[u8]) -> Result<SaslHandshakeReply> {
    let mut d = Decoder::new(frame);
    let correlation_id = d.i32()?;
    let error_code = d.i16()?;
    let n = d.i32()?;
    ensure!((0..=100).contains(&n), "implausible mechanism count {n}");
    let mechanisms = (0..n).map(|_| d.string()).collect::<Result<Vec<_>>>()?;
    ensure!(
        d.remaining() == 0,
        "{} trailing bytes after a SaslHandshake response",
        d.remaining()
    );
    Ok(SaslHandshakeReply {
        correlation_id,
        error_code,
        mechanisms,
    })
}

/// Sends SaslHandshake at `version` (0 or 1) and decodes the answer.
pub fn sasl_handshake<S: Read + Write>(
    stream: &mut S,
    version: i16,
    mechanism: &str,
    correlation_id: i32,
) -> Result<SaslHandshakeReply> {
    let req = request_frame(
        API_KEY_SASL_HANDSHAKE,
        version,
        correlation_id,
        Some("it"),
        false,
        &sasl_handshake_body(mechanism),
    );
    stream.write_all(&req).context("send SaslHandshake")?;
    let reply = parse_sasl_handshake_response(&read_frame(stream)?)?;
    ensure!(
        reply.correlation_id == correlation_id,
        "SaslHandshake correlation id {} != {correlation_id}",
        reply.correlation_id
    );
    Ok(reply)
}

/// A SaslAuthenticate response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaslAuthenticateReply {
    pub correlation_id: i32,
    pub error_code: i16,
    pub error_message: Option<String>,
    pub auth_bytes: Vec<u8>,
    /// v1+: how long the session lasts before the client must re-authenticate (0: for ever).
    pub session_lifetime_ms: i64,
}

/// A complete SaslAuthenticate request frame at `version` (0..=2; v2 is flexible: header v2,
/// COMPACT_BYTES, tagged fields).
pub fn sasl_authenticate_frame(version: i16, correlation_id: i32, auth_bytes: &[u8]) -> Vec<u8> {
    let flexible = version >= 2;
    let mut body = Encoder::new();
    if flexible {
        body.compact_bytes(auth_bytes).uvarint(0);
    } else {
        body.sized_bytes(auth_bytes);
    }
    request_frame(
        API_KEY_SASL_AUTHENTICATE,
        version,
        correlation_id,
        Some("it"),
        flexible,
        &body.buf,
    )
}

/// Decodes a SaslAuthenticate response at `version` (0..=2), every byte accounted for.
pub fn parse_sasl_authenticate_response(version: i16, frame: &[u8]) -> Result<SaslAuthenticateReply> {
    let flexible = version >= 2;
    let mut d = Decoder::new(frame);
    let correlation_id = d.i32()?;
    if flexible {
        d.tagged_fields()?; // response header v1
    }
    let error_code = d.i16()?;
    let (error_message, auth_bytes) = if flexible {
        (d.compact_nullable_string()?, d.compact_bytes()?)
    } else {
        (d.nullable_string()?, d.sized_bytes()?)
    };
    let session_lifetime_ms = if version >= 1 { d.i64()? } else { 0 };
    if flexible {
        d.tagged_fields()?;
    }
    ensure!(
        d.remaining() == 0,
        "{} trailing bytes after a SaslAuthenticate v{version} response",
        d.remaining()
    );
    Ok(SaslAuthenticateReply {
        correlation_id,
        error_code,
        error_message,
        auth_bytes,
        session_lifetime_ms,
    })
}

/// Sends one SaslAuthenticate token at `version` (0..=2) and decodes the answer.
pub fn sasl_authenticate<S: Read + Write>(
    stream: &mut S,
    version: i16,
    auth_bytes: &[u8],
    correlation_id: i32,
) -> Result<SaslAuthenticateReply> {
    stream
        .write_all(&sasl_authenticate_frame(version, correlation_id, auth_bytes))
        .context("send SaslAuthenticate")?;
    let reply = parse_sasl_authenticate_response(version, &read_frame(stream)?)?;
    ensure!(
        reply.correlation_id == correlation_id,
        "SaslAuthenticate correlation id {} != {correlation_id}",
        reply.correlation_id
    );
    Ok(reply)
}

/// SASL/PLAIN's one message (RFC 4616): `authzid NUL user NUL password`, no authzid.
pub fn sasl_plain_message(user: &str, password: &str) -> Vec<u8> {
    format!("\0{user}\0{password}").into_bytes()
}

/// One record for [`record_batch_v2`].
#[derive(Debug, Clone)]
pub struct RawRecord<'a> {
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
}

/// Encodes an uncompressed v2 record batch (magic 2) with a correct CRC32C, as a producer without
/// idempotence sends it: base offset 0, producer id -1.
pub fn record_batch_v2(base_timestamp_ms: i64, records: &[RawRecord<'_>]) -> Vec<u8> {
    let mut recs = Encoder::new();
    for (i, r) in records.iter().enumerate() {
        let mut rec = Encoder::new();
        rec.i8(0).varlong(0).varlong(i as i64);
        match r.key {
            Some(k) => rec.varlong(k.len() as i64).bytes(k),
            None => rec.varlong(-1),
        };
        match r.value {
            Some(v) => rec.varlong(v.len() as i64).bytes(v),
            None => rec.varlong(-1),
        };
        rec.varlong(0); // headers
        recs.varlong(rec.buf.len() as i64).bytes(&rec.buf);
    }
    // Everything the CRC covers: attributes .. end of records.
    let mut tail = Encoder::new();
    tail.i16(0) // attributes: no compression, create time
        .i32(records.len() as i32 - 1) // last offset delta
        .i64(base_timestamp_ms)
        .i64(base_timestamp_ms)
        .i64(-1) // producer id
        .i16(-1) // producer epoch
        .i32(-1) // base sequence
        .i32(records.len() as i32)
        .bytes(&recs.buf);
    let crc = crc32c::crc32c(&tail.buf);
    let mut after_length = Encoder::new();
    after_length.i32(-1).i8(2).u32(crc).bytes(&tail.buf); // leader epoch, magic, crc
    let mut batch = Encoder::new();
    batch.i64(0).i32(after_length.buf.len() as i32).bytes(&after_length.buf);
    batch.buf
}

/// Produce request body for versions 3..=8 (all share one layout): one topic, one partition.
pub fn produce_body_v3(acks: i16, timeout_ms: i32, topic: &str, partition: i32, batch: &[u8]) -> Vec<u8> {
    let mut body = Encoder::new();
    body.nullable_string(None) // transactional id
        .i16(acks)
        .i32(timeout_ms)
        .i32(1)
        .string(topic)
        .i32(1)
        .i32(partition)
        .i32(batch.len() as i32)
        .bytes(batch);
    body.buf
}

/// The first partition result of a Produce v3..=8 response: (topic, partition, error code,
/// base offset). Fields after the base offset differ by version and are not read.
pub fn parse_produce_response_first_partition(frame: &[u8]) -> Result<(i32, String, i32, i16, i64)> {
    let mut d = Decoder::new(frame);
    let correlation_id = d.i32()?;
    let topics = d.i32()?;
    ensure!(topics == 1, "expected 1 topic in produce response, got {topics}");
    let topic = d.string()?;
    let partitions = d.i32()?;
    ensure!(
        partitions == 1,
        "expected 1 partition in produce response, got {partitions}"
    );
    let partition = d.i32()?;
    let error_code = d.i16()?;
    let base_offset = d.i64()?;
    Ok((correlation_id, topic, partition, error_code, base_offset))
}

/// Deterministic pseudo-random bytes (xorshift64*), so a failing garbage input is reproducible.
pub fn pseudo_random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.max(1);
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    out.truncate(len);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varlong_matches_kafka_zigzag_examples() {
        let enc = |v| Encoder::new().varlong(v).buf.clone();
        assert_eq!(enc(0), vec![0]);
        assert_eq!(enc(-1), vec![1]);
        assert_eq!(enc(1), vec![2]);
        assert_eq!(enc(300), vec![0xd8, 0x04]);
    }

    #[test]
    fn record_batch_length_field_counts_bytes_after_it() {
        let batch = record_batch_v2(
            0,
            &[RawRecord {
                key: Some(b"k"),
                value: Some(b"v"),
            }],
        );
        let len = i32::from_be_bytes(batch[8..12].try_into().unwrap());
        assert_eq!(len as usize, batch.len() - 12);
        assert_eq!(batch[16], 2, "magic");
        let crc = u32::from_be_bytes(batch[17..21].try_into().unwrap());
        assert_eq!(crc, crc32c::crc32c(&batch[21..]));
    }

    #[test]
    fn sasl_authenticate_v2_is_flexible_and_v1_is_not() {
        let v1 = sasl_authenticate_frame(1, 9, b"tok");
        // size, key, version, correlation id, client id "it", BYTES(3) "tok"
        assert_eq!(v1.len(), 4 + 2 + 2 + 4 + 4 + 4 + 3);
        let v2 = sasl_authenticate_frame(2, 9, b"tok");
        // + header tags, COMPACT_BYTES (1-byte length), body tags
        assert_eq!(v2.len(), 4 + 2 + 2 + 4 + 4 + 1 + 1 + 3 + 1);
        let mut e = Encoder::new();
        e.i32(9)
            .uvarint(0)
            .i16(58)
            .uvarint(4)
            .bytes(b"bad")
            .uvarint(1)
            .i64(0)
            .uvarint(0);
        let reply = parse_sasl_authenticate_response(2, &e.buf).unwrap();
        assert_eq!(reply.error_code, 58);
        assert_eq!(reply.error_message.as_deref(), Some("bad"));
        assert!(reply.auth_bytes.is_empty());
    }

    #[test]
    fn api_versions_v0_parse_rejects_trailing_bytes() {
        let mut e = Encoder::new();
        e.i32(7).i16(35).i32(1).i16(18).i16(0).i16(3);
        assert_eq!(parse_api_versions_v0(&e.buf).unwrap().apis.len(), 1);
        e.i32(0);
        assert!(parse_api_versions_v0(&e.buf).is_err());
    }
}
