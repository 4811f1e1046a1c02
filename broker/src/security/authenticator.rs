//! One connection's authentication, as Kafka's `SaslServerAuthenticator` runs it:
//!
//! - On a SASL listener a connection starts unauthenticated: it may send ApiVersions and
//!   SaslHandshake only, in frames of at most `sasl.server.max.receive.size` bytes; anything
//!   else closes it ("Unexpected Kafka request of type X during SASL handshake").
//! - SaslHandshake picks an enabled mechanism (else UNSUPPORTED_SASL_MECHANISM with the list).
//!   After a v1 handshake the tokens come as SaslAuthenticate requests; after a v0 handshake as
//!   bare size-prefixed frames, answered the same way.
//! - A failed exchange answers SASL_AUTHENTICATION_FAILED with Kafka's message after
//!   `connection.failed.authentication.delay.ms` (KIP-306) and closes the connection.
//! - A completed one sets the connection's principal (`User:<name>`) and, when the
//!   credential expires (an OAUTHBEARER token) or `connections.max.reauth.ms` is set, a
//!   session lifetime the client is told (SaslAuthenticate v1+, KIP-368). The client
//!   re-authenticates with a new SaslHandshake before it ends, as the same principal; a
//!   request after it ended closes the connection.
//!
//! On listeners without SASL the connection is its TLS certificate's principal or ANONYMOUS,
//! and SaslHandshake is refused with ILLEGAL_SASL_STATE, as in Kafka, except that another
//! broker may prove the cluster secret there with SCRAM-SHA-512 as [`super::BROKER_USER`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::oauthbearer;
use super::scram::{ScramServer, ScramStep};
use super::{Security, BROKER_USER};
use crate::clock::now_ms;
use crate::config::SaslMechanism;
use crate::metadata::image::MetadataImage;
use crate::metadata::records::ScramMechanism;

/// What one SASL exchange step produced.
enum Step {
    Continue(Vec<u8>),
    Complete {
        user: String,
        response: Vec<u8>,
        /// When the credential stops being valid (an OAUTHBEARER token's `exp`), ms since epoch.
        expires_at_ms: Option<u64>,
    },
    /// Refused: the message the client gets, and the reason for the broker's log.
    Failed {
        client: String,
        log: String,
    },
}

// Lives only inside the boxed `Exchange`, for the few round trips of one login.
#[allow(clippy::large_enum_variant)]
enum MechanismServer {
    Plain,
    Scram(ScramServer),
    /// OAUTHBEARER: set once a token was refused and the error challenge sent.
    OAuthBearer {
        refused: Option<String>,
    },
}

struct Exchange {
    mechanism: SaslMechanism,
    /// Tokens as bare frames (SaslHandshake v0) rather than SaslAuthenticate requests.
    raw: bool,
    server: MechanismServer,
    /// Only the brokers' own user may authenticate (the mechanism is not enabled here).
    brokers_only: bool,
    /// Re-authenticating: the principal the connection had, which must not change.
    reauth_of: Option<Arc<str>>,
}

enum State {
    /// Nothing to authenticate on this listener (PLAINTEXT, SSL), or authenticated.
    Open,
    /// A SASL listener before its SaslHandshake.
    AwaitHandshake,
    /// Boxed: most connections are `Open` for their whole life and stay small.
    Exchange(Box<Exchange>),
}

/// The answer to a SASL request or token.
pub struct SaslReply {
    /// The response to queue: a response body, or a bare token (v0).
    pub response: Option<SaslResponse>,
    /// Close the connection once the response is written, after this delay, for this reason.
    pub close: Option<(Duration, String)>,
}

pub enum SaslResponse {
    Handshake(SaslHandshakeResponse),
    Authenticate(SaslAuthenticateResponse),
    Raw(Vec<u8>),
}

pub struct Authenticator {
    security: Arc<Security>,
    listener: Arc<str>,
    sasl_listener: bool,
    state: State,
    /// The mechanism the connection authenticated with, if SASL.
    mechanism: Option<SaslMechanism>,
    /// Whether the client used SaslAuthenticate v1+ (so it can re-authenticate).
    reauth_capable: bool,
    /// When the SASL session ends.
    expires_at: Option<Instant>,
}

impl Authenticator {
    pub fn new(security: Arc<Security>, listener: Arc<str>) -> Authenticator {
        let sasl_listener = security.listener(&listener).is_some_and(|l| l.protocol.uses_sasl());
        Authenticator {
            state: if sasl_listener {
                State::AwaitHandshake
            } else {
                State::Open
            },
            security,
            listener,
            sasl_listener,
            mechanism: None,
            reauth_capable: false,
            expires_at: None,
        }
    }

    /// Whether the connection has not authenticated yet (so its frames are capped small).
    pub fn is_authenticating(&self) -> bool {
        !matches!(self.state, State::Open)
    }

    /// The largest frame the connection may send now.
    pub fn max_frame_bytes(&self, authenticated_max: usize) -> usize {
        if self.is_authenticating() && self.principal_unset() {
            self.security
                .settings
                .sasl_server_max_receive_size
                .min(authenticated_max)
        } else {
            authenticated_max
        }
    }

    fn principal_unset(&self) -> bool {
        !matches!(&self.state, State::Exchange(e) if e.reauth_of.is_some())
    }

    /// The next frame is a bare SASL token (after a v0 handshake).
    pub fn expects_raw_token(&self) -> bool {
        matches!(&self.state, State::Exchange(e) if e.raw)
    }

    /// Whether a request other than SaslHandshake/SaslAuthenticate may be handled now; the
    /// error is why the connection closes.
    pub fn screen(&self, api_key: i16, now: Instant) -> Result<(), String> {
        match &self.state {
            State::Open => match self.expires_at {
                Some(at) if now >= at => Err(format!(
                    "its SASL session expired (credential lifetime or connections.max.reauth.ms={}) without re-authentication; the client must re-authenticate before the session lifetime it was told ends",
                    self.security.settings.connections_max_reauth_ms
                )),
                _ => Ok(()),
            },
            _ if api_key == ApiKey::ApiVersions as i16 => Ok(()),
            _ => Err(format!(
                "Unexpected Kafka request of type {} during SASL handshake; a client must authenticate (SaslHandshake, SaslAuthenticate) before anything else on this SASL listener (check security.protocol and sasl.mechanism)",
                api_name(api_key)
            )),
        }
    }

    /// SaslHandshake: choose the mechanism.
    pub fn handshake(&mut self, version: i16, request: &SaslHandshakeRequest, principal: &Arc<str>) -> SaslReply {
        let asked = request.mechanism.as_str();
        let enabled: Vec<SaslMechanism> = self
            .security
            .listener(&self.listener)
            .map(|l| l.sasl_mechanisms.clone())
            .unwrap_or_default();
        let response = |code: i16| {
            Some(SaslResponse::Handshake(
                SaslHandshakeResponse::default()
                    .with_error_code(code)
                    .with_mechanisms(enabled.iter().map(|m| StrBytes::from_static_str(m.name())).collect()),
            ))
        };
        // Kafka matches the name exactly (no trimming, no case folding).
        let mechanism = SaslMechanism::ALL.into_iter().find(|m| m.name() == asked);
        let broker_login = mechanism == Some(SaslMechanism::ScramSha512) && self.security.has_broker_login();
        let reauth_of = match &self.state {
            State::AwaitHandshake => None,
            State::Exchange(_) => {
                return SaslReply {
                    response: None,
                    close: Some((
                        Duration::ZERO,
                        "a second SaslHandshake arrived during SASL authentication".into(),
                    )),
                }
            }
            State::Open if self.sasl_listener && self.reauth_capable => {
                if mechanism != self.mechanism {
                    return self.fail(
                        response(ResponseError::UnsupportedSaslMechanism.code()),
                        format!(
                            "SASL mechanism '{asked}' requested by client is not supported for re-authentication of mechanism '{}'",
                            self.mechanism.map_or("", |m| m.name())
                        ),
                    );
                }
                Some(principal.clone())
            }
            // No SASL here (or no re-authentication): Kafka's answer, unless a broker proves the
            // cluster secret.
            State::Open if broker_login && !self.sasl_listener => None,
            State::Open => {
                return SaslReply {
                    response: response(ResponseError::IllegalSaslState.code()),
                    close: None,
                }
            }
        };
        let Some(mechanism) = mechanism.filter(|m| enabled.contains(m) || broker_login) else {
            return self.fail(
                response(ResponseError::UnsupportedSaslMechanism.code()),
                format!(
                    "the client asked for SASL mechanism {asked:?}, which listener {} does not enable",
                    self.listener
                ),
            );
        };
        let server = match mechanism {
            SaslMechanism::Plain => MechanismServer::Plain,
            SaslMechanism::ScramSha256 => {
                MechanismServer::Scram(ScramServer::new(ScramMechanism::Sha256, self.security.decoy_key()))
            }
            SaslMechanism::ScramSha512 => {
                MechanismServer::Scram(ScramServer::new(ScramMechanism::Sha512, self.security.decoy_key()))
            }
            SaslMechanism::OAuthBearer => MechanismServer::OAuthBearer { refused: None },
        };
        self.state = State::Exchange(Box::new(Exchange {
            mechanism,
            raw: version == 0,
            server,
            brokers_only: !enabled.contains(&mechanism),
            reauth_of,
        }));
        SaslReply {
            response: response(0),
            close: None,
        }
    }

    /// SaslAuthenticate (v0+): one token of the exchange.
    pub async fn authenticate(
        &mut self,
        version: i16,
        request: SaslAuthenticateRequest,
        image: Arc<MetadataImage>,
        principal: &mut Arc<str>,
    ) -> SaslReply {
        if matches!(&self.state, State::AwaitHandshake) {
            // Kafka: IllegalSaslStateException, no response, the connection closes (after the
            // failed-authentication delay).
            return self.fail(
                None,
                "Unexpected Kafka request of type SASL_AUTHENTICATE during SASL handshake; a client sends SaslHandshake first".into(),
            );
        }
        if !matches!(&self.state, State::Exchange(e) if !e.raw) {
            return SaslReply {
                response: Some(SaslResponse::Authenticate(
                    SaslAuthenticateResponse::default()
                        .with_error_code(ResponseError::IllegalSaslState.code())
                        .with_error_message(Some(StrBytes::from_static_str(
                            "SaslAuthenticate request received outside a SASL exchange; send SaslHandshake first",
                        ))),
                )),
                close: None,
            };
        }
        self.reauth_capable |= version > 0;
        let step = self.evaluate(request.auth_bytes, image).await;
        self.finish_step(step, principal, |token, lifetime_ms| {
            SaslResponse::Authenticate(
                SaslAuthenticateResponse::default()
                    .with_auth_bytes(Bytes::from(token))
                    .with_session_lifetime_ms(lifetime_ms),
            )
        })
    }

    /// A bare token after a v0 handshake.
    pub async fn raw_token(&mut self, token: Bytes, image: Arc<MetadataImage>, principal: &mut Arc<str>) -> SaslReply {
        let step = self.evaluate(token, image).await;
        let mut reply = self.finish_step(step, principal, |token, _| SaslResponse::Raw(token));
        // v0 has no error response: a failure only closes.
        if reply.close.is_some() {
            reply.response = None;
        }
        reply
    }

    fn finish_step(
        &mut self,
        step: Step,
        principal: &mut Arc<str>,
        respond: impl Fn(Vec<u8>, i64) -> SaslResponse,
    ) -> SaslReply {
        let State::Exchange(exchange) = std::mem::replace(&mut self.state, State::Open) else {
            unreachable!("finish_step runs only during an exchange");
        };
        match step {
            Step::Continue(token) => {
                self.state = State::Exchange(exchange);
                SaslReply {
                    response: Some(respond(token, 0)),
                    close: None,
                }
            }
            Step::Failed { client, log } => {
                self.state = State::Exchange(exchange);
                self.fail(Some(authentication_failed(client)), log)
            }
            Step::Complete {
                user,
                response,
                expires_at_ms,
            } => {
                if exchange.brokers_only && user != BROKER_USER {
                    self.state = State::Exchange(exchange);
                    return self.fail(
                        Some(authentication_failed(format!(
                            "Authentication failed during authentication due to invalid credentials with SASL mechanism {}",
                            SaslMechanism::ScramSha512
                        ))),
                        format!("{user:?} used the brokers' SCRAM-SHA-512 login on a listener that does not enable it"),
                    );
                }
                let new_principal: Arc<str> = Arc::from(format!("User:{user}"));
                if let Some(previous) = &exchange.reauth_of {
                    if **previous != *new_principal {
                        let message = format!(
                            "Cannot change principals during re-authentication from {}: {}",
                            previous.replacen(':', ".", 1),
                            new_principal.replacen(':', ".", 1)
                        );
                        self.state = State::Exchange(exchange);
                        return self.fail(Some(authentication_failed(message.clone())), message);
                    }
                }
                let lifetime_ms = self.session_lifetime_ms(exchange.mechanism, expires_at_ms);
                self.expires_at = (lifetime_ms > 0).then(|| Instant::now() + Duration::from_millis(lifetime_ms as u64));
                self.mechanism = Some(exchange.mechanism);
                self.security.count_authentication(&self.listener, true);
                if exchange.reauth_of.is_none() {
                    tracing::debug!(listener = %self.listener, principal = %new_principal,
                        mechanism = exchange.mechanism.name(), "client authenticated");
                }
                *principal = new_principal;
                SaslReply {
                    response: Some(respond(response, lifetime_ms)),
                    close: None,
                }
            }
        }
    }

    /// Kafka's session lifetime: the credential's remaining life and `connections.max.reauth.ms`,
    /// whichever is set, or the shorter of the two.
    fn session_lifetime_ms(&self, _mechanism: SaslMechanism, expires_at_ms: Option<u64>) -> i64 {
        let max_reauth = self.security.settings.connections_max_reauth_ms;
        let credential = expires_at_ms.map(|at| at.saturating_sub(now_ms().max(0) as u64));
        let lifetime = match (credential, max_reauth) {
            (None, 0) => 0,
            (None, max) => max,
            (Some(left), 0) => left.max(1),
            (Some(left), max) => left.min(max).max(1),
        };
        i64::try_from(lifetime).unwrap_or(i64::MAX)
    }

    fn fail(&mut self, response: Option<SaslResponse>, log: String) -> SaslReply {
        self.security.count_authentication(&self.listener, false);
        let delay = Duration::from_millis(self.security.settings.failed_authentication_delay_ms);
        SaslReply {
            response,
            close: Some((delay, format!("authentication failed: {log}"))),
        }
    }

    async fn evaluate(&mut self, token: Bytes, image: Arc<MetadataImage>) -> Step {
        let State::Exchange(exchange) = &mut self.state else {
            unreachable!("evaluate runs only during an exchange");
        };
        let security = self.security.clone();
        let brokers_only = exchange.brokers_only;
        let mechanism = exchange.mechanism;
        let during = if exchange.reauth_of.is_some() {
            "re-authentication"
        } else {
            "authentication"
        };
        match &mut exchange.server {
            MechanismServer::Scram(server) => {
                let scram = match mechanism {
                    SaslMechanism::ScramSha256 => ScramMechanism::Sha256,
                    _ => ScramMechanism::Sha512,
                };
                let step = server.step(&token, |user| {
                    if brokers_only && user != BROKER_USER {
                        return None;
                    }
                    security.scram_credential(&image, user, scram)
                });
                match step {
                    ScramStep::Continue(challenge) => Step::Continue(challenge),
                    ScramStep::Complete { user, response } => Step::Complete {
                        user,
                        response,
                        expires_at_ms: None,
                    },
                    // Kafka's message: the same for an unknown user and a wrong password.
                    ScramStep::Failed(log) => Step::Failed {
                        client: format!(
                            "Authentication failed during {during} due to invalid credentials with SASL mechanism {mechanism}"
                        ),
                        log,
                    },
                }
            }
            MechanismServer::Plain => {
                // A PBKDF2 of the stored iterations: off the async workers.
                tokio::task::spawn_blocking(move || plain(&security, &image, &token))
                    .await
                    .unwrap_or_else(|e| Step::Failed {
                        client: "Authentication failed: credentials for user could not be verified".into(),
                        log: format!("the PLAIN check panicked: {e}"),
                    })
            }
            MechanismServer::OAuthBearer { refused } => {
                if let Some(error) = refused.take() {
                    // The client acknowledged the error challenge (RFC 7628: a lone 0x01).
                    return Step::Failed {
                        client: oauthbearer::error_challenge().to_string(),
                        log: error,
                    };
                }
                let Some(validator) = security.oauth.clone() else {
                    return Step::Failed {
                        client: oauthbearer::error_challenge().into(),
                        log: "OAUTHBEARER has no validator".into(),
                    };
                };
                let checked = tokio::task::spawn_blocking(move || {
                    let token = oauthbearer::parse_initial_response(&token)
                        .map_err(|e| format!("the OAUTHBEARER initial response was refused ({e})"))?;
                    validator.validate(token, now_ms().max(0) as u64)
                })
                .await
                .unwrap_or_else(|e| Err(format!("the token check panicked: {e}")));
                match checked {
                    Ok(valid) => Step::Complete {
                        user: valid.principal_name,
                        response: Vec::new(),
                        expires_at_ms: Some(valid.expires_at_ms),
                    },
                    Err(error) => {
                        *refused = Some(error);
                        Step::Continue(oauthbearer::error_challenge().as_bytes().to_vec())
                    }
                }
            }
        }
    }
}

/// A SASL/PLAIN message (RFC 4616): `authzid NUL user NUL password`, or the message Kafka
/// refuses it with.
pub fn parse_plain(message: &[u8]) -> Result<(String, String, String), String> {
    // Decoded as Kafka decodes it (invalid UTF-8 becomes U+FFFD), so such a password is simply wrong.
    let text = String::from_utf8_lossy(message);
    let tokens: Vec<&str> = text.splitn(4, '\0').collect();
    let [authzid, user, password] = tokens[..] else {
        return Err(format!(
            "Invalid SASL/PLAIN response: expected 3 tokens, got {}",
            tokens.len()
        ));
    };
    if user.is_empty() {
        return Err("Authentication failed: username not specified".into());
    }
    if password.is_empty() {
        return Err("Authentication failed: password not specified".into());
    }
    Ok((authzid.to_string(), user.to_string(), password.to_string()))
}

/// SASL/PLAIN, the password checked against the user's SCRAM credential (one user store, no
/// plaintext password file).
fn plain(security: &Security, image: &MetadataImage, message: &[u8]) -> Step {
    let failed = |client: &str, log: String| Step::Failed {
        client: client.to_string(),
        log,
    };
    let (authzid, user, password) = match parse_plain(message) {
        Ok(parsed) => parsed,
        Err(client) => return failed(&client, "a malformed PLAIN message".into()),
    };
    let (authzid, user, password) = (authzid.as_str(), user.as_str(), password.as_str());
    let credential = [ScramMechanism::Sha512, ScramMechanism::Sha256]
        .into_iter()
        .find_map(|m| security.scram_credential(image, user, m));
    let matches = match &credential {
        Some(credential) => super::scram::password_matches(credential, password),
        None => {
            // The same work for an unknown user, so timing does not tell who exists.
            let decoy = super::scram::credential_from_salted(user, ScramMechanism::Sha512, vec![0; 16], &[0; 64], 4096);
            let _ = super::scram::password_matches(&decoy, password);
            false
        }
    };
    if !matches {
        let why = if credential.is_some() {
            "a wrong password"
        } else {
            "an unknown user"
        };
        return failed(
            "Authentication failed: Invalid username or password",
            format!("PLAIN login of {user:?} with {why}"),
        );
    }
    if !authzid.is_empty() && authzid != user {
        return failed(
            "Authentication failed: Client requested an authorization id that is different from username",
            format!("{user:?} asked to act as {authzid:?}"),
        );
    }
    Step::Complete {
        user: user.to_string(),
        response: Vec::new(),
        expires_at_ms: None,
    }
}

fn authentication_failed(message: String) -> SaslResponse {
    SaslResponse::Authenticate(
        SaslAuthenticateResponse::default()
            .with_error_code(ResponseError::SaslAuthenticationFailed.code())
            .with_error_message(Some(StrBytes::from_string(message))),
    )
}

fn api_name(api_key: i16) -> String {
    ApiKey::try_from(api_key).map_or_else(|_| format!("api key {api_key}"), |k| format!("{k:?}").to_uppercase())
}
