//! One connection from this broker to another broker's Kafka listener, for the replica
//! fetcher: requests are encoded with the `kafka-protocol` codecs, one in flight at a time.
//! Over TLS when the inter-broker listener uses it, and logged in (SASL) as this broker when
//! the security settings give it a credential.

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{RequestHeader, ResponseHeader, SaslAuthenticateRequest, SaslHandshakeRequest};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::config::{BrokerConfig, SaslMechanism};
use crate::metadata::image::MetadataImage;
use crate::metadata::records::ScramMechanism;
use crate::security::scram::ScramClient;
use crate::security::Security;

/// A byte stream to another broker: TCP, or TLS over TCP.
trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// How long the TLS handshake and the SASL login may take.
const LOGIN_TIMEOUT: Duration = Duration::from_secs(10);

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
    #[error("cannot log in to broker {0}: {1}")]
    Login(i32, String),
}

pub struct BrokerConnection {
    broker: i32,
    stream: Box<dyn Io>,
    next_correlation_id: i32,
    client_id: StrBytes,
}

impl BrokerConnection {
    /// Connects, over TLS with `tls` when given (the server name checked is `host`).
    pub async fn connect(
        broker: i32,
        host: &str,
        port: i32,
        client_id: String,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<Self, ClientError> {
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
        let stream: Box<dyn Io> = match tls {
            None => Box::new(stream),
            Some(config) => {
                let name = rustls::pki_types::ServerName::try_from(host.to_string())
                    .map_err(|e| ClientError::Login(broker, format!("{host} is not a name TLS can check: {e}")))?;
                let handshake = tokio_rustls::TlsConnector::from(config).connect(name, stream);
                match tokio::time::timeout(LOGIN_TIMEOUT, handshake).await {
                    Ok(Ok(tls)) => Box::new(tls),
                    Ok(Err(e)) => {
                        return Err(ClientError::Login(
                            broker,
                            format!("the TLS handshake with {addr} failed: {e}; check that this broker's truststore trusts that broker's certificate and that it names {host}"),
                        ))
                    }
                    Err(_) => return Err(ClientError::Timeout(broker, LOGIN_TIMEOUT)),
                }
            }
        };
        Ok(BrokerConnection {
            broker,
            stream,
            next_correlation_id: 0,
            client_id: StrBytes::from_string(client_id),
        })
    }

    /// Connects to `broker`'s inter-broker listener as the image names it, over TLS and logged
    /// in as this broker when the security settings say so; `purpose` names the client id.
    pub async fn dial_broker(
        broker: i32,
        purpose: &str,
        image: &MetadataImage,
        config: &BrokerConfig,
        security: &Security,
    ) -> Result<Self, ClientError> {
        let listener = &config.listeners.inter_broker;
        let endpoint = match image.brokers.get(&broker).map(|b| b.endpoint(listener).cloned()) {
            Some(Some(endpoint)) => endpoint,
            Some(None) => {
                return Err(ClientError::Protocol(
                    broker,
                    format!(
                        "the broker has no listener named {listener} (inter.broker.listener.name); give every broker the same inter-broker listener"
                    ),
                ))
            }
            None => return Err(ClientError::Protocol(broker, "the broker is not registered".into())),
        };
        let client_id = format!("{purpose}-{}", config.node_id);
        let tls = security.inter_broker_tls().map(|t| t.client_config());
        let mut connection = Self::connect(broker, &endpoint.host, endpoint.port, client_id, tls).await?;
        if let Some((mechanism, user, password)) = security.inter_broker_credentials() {
            connection
                .login(mechanism, &user, password.expose())
                .await
                .map_err(|e| match e {
                    ClientError::Login(broker, message) => ClientError::Login(
                        broker,
                        format!("{message} (check that every broker has the same cluster secret, or the inter-broker credentials)"),
                    ),
                    other => other,
                })?;
        }
        Ok(connection)
    }

    /// Logs in with SASL (SaslHandshake v1, SaslAuthenticate v1) as `user`.
    pub async fn login(&mut self, mechanism: SaslMechanism, user: &str, password: &str) -> Result<(), ClientError> {
        let broker = self.broker;
        let failed = |message: String| ClientError::Login(broker, message);
        let handshake = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism.name()));
        let answer = self.call(&handshake, 1, LOGIN_TIMEOUT).await?;
        if answer.error_code != 0 {
            let offered: Vec<&str> = answer.mechanisms.iter().map(|m| m.as_str()).collect();
            return Err(failed(format!(
                "it does not accept {mechanism} (error {}; it offers {offered:?}); enable it in sasl.enabled.mechanisms on every broker",
                answer.error_code
            )));
        }
        match mechanism {
            SaslMechanism::Plain => {
                self.authenticate(format!("\0{user}\0{password}").into_bytes()).await?;
            }
            SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512 => {
                let hash = if mechanism == SaslMechanism::ScramSha256 {
                    ScramMechanism::Sha256
                } else {
                    ScramMechanism::Sha512
                };
                let mut client = ScramClient::new(hash, user, password);
                let challenge = self.authenticate(client.first_message()).await?;
                let last = client.final_message(&challenge).map_err(failed)?;
                let server_final = self.authenticate(last).await?;
                client.verify_server(&server_final).map_err(failed)?;
            }
            SaslMechanism::OAuthBearer => return Err(failed("brokers do not log in with OAUTHBEARER".into())),
        }
        Ok(())
    }

    async fn authenticate(&mut self, token: Vec<u8>) -> Result<Vec<u8>, ClientError> {
        let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token));
        let answer = self.call(&request, 1, LOGIN_TIMEOUT).await?;
        if answer.error_code != 0 {
            let message = answer.error_message.as_deref().unwrap_or("").to_string();
            return Err(ClientError::Login(self.broker, message));
        }
        Ok(answer.auth_bytes.to_vec())
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
