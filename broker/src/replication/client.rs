//! One connection from this broker to another broker's Kafka listener, for the replica
//! fetcher: requests are encoded with the `kafka-protocol` codecs, one in flight at a time.

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A response larger than this is refused (the fetcher asks for far less).
const MAX_RESPONSE_BYTES: usize = 256 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach broker {broker} at {addr}: {source}")]
    Connect {
        broker: i32,
        addr: String,
        source: std::io::Error,
    },
    #[error("connection to broker {0} failed: {1}")]
    Io(i32, std::io::Error),
    #[error("broker {0} did not answer within {1:?}")]
    Timeout(i32, Duration),
    #[error("broker {0} sent a response that does not decode: {1}")]
    Protocol(i32, String),
}

pub struct BrokerConnection {
    broker: i32,
    stream: TcpStream,
    next_correlation_id: i32,
    client_id: StrBytes,
}

impl BrokerConnection {
    pub async fn connect(broker: i32, host: &str, port: i32, client_id: String) -> Result<Self, ClientError> {
        let addr = format!("{host}:{port}");
        let connect = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(&addr));
        let stream = match connect.await {
            Ok(Ok(stream)) => stream,
            Ok(Err(source)) => return Err(ClientError::Connect { broker, addr, source }),
            Err(_) => {
                return Err(ClientError::Connect {
                    broker,
                    addr,
                    source: std::io::ErrorKind::TimedOut.into(),
                })
            }
        };
        let _ = stream.set_nodelay(true);
        Ok(BrokerConnection {
            broker,
            stream,
            next_correlation_id: 0,
            client_id: StrBytes::from_string(client_id),
        })
    }

    /// The broker at the other end.
    pub fn broker(&self) -> i32 {
        self.broker
    }

    /// Sends `request` at `version` and waits up to `timeout` for its response.
    pub async fn call<R: Request>(
        &mut self,
        request: &R,
        version: i16,
        timeout: Duration,
    ) -> Result<R::Response, ClientError> {
        let protocol = |e: anyhow::Error| ClientError::Protocol(self.broker, e.to_string());
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(self.client_id.clone()));
        let mut buf = BytesMut::with_capacity(256);
        buf.put_i32(0);
        header.encode(&mut buf, R::header_version(version)).map_err(protocol)?;
        request.encode(&mut buf, version).map_err(protocol)?;
        let size = (buf.len() - 4) as i32;
        buf[..4].copy_from_slice(&size.to_be_bytes());
        let broker = self.broker;
        let exchange = async {
            self.stream.write_all(&buf).await?;
            let size = self.stream.read_i32().await?;
            let size = usize::try_from(size)
                .ok()
                .filter(|s| *s <= MAX_RESPONSE_BYTES)
                .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "bad response size"))?;
            let mut body = BytesMut::zeroed(size);
            self.stream.read_exact(&mut body).await?;
            Ok::<Bytes, std::io::Error>(body.freeze())
        };
        let mut body = match tokio::time::timeout(timeout, exchange).await {
            Ok(Ok(body)) => body,
            Ok(Err(e)) => return Err(ClientError::Io(broker, e)),
            Err(_) => return Err(ClientError::Timeout(broker, timeout)),
        };
        let protocol = |e: anyhow::Error| ClientError::Protocol(broker, e.to_string());
        let response_header =
            ResponseHeader::decode(&mut body, R::Response::header_version(version)).map_err(protocol)?;
        if response_header.correlation_id != correlation_id {
            return Err(ClientError::Protocol(
                broker,
                format!(
                    "correlation id {} answers request {correlation_id}",
                    response_header.correlation_id
                ),
            ));
        }
        R::Response::decode(&mut body, version).map_err(protocol)
    }
}
