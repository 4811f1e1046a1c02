//! Security: who a connection is (TLS client certificates, SASL), and what it may do (ACLs).
//!
//! - `tls` — rustls server and client configurations from Kafka's `ssl.*` settings, re-read
//!   when the files change; the client certificate's principal.
//! - `authenticator` — one connection's SASL state (SaslHandshake / SaslAuthenticate, raw v0
//!   tokens, KIP-368 re-authentication, the pre-authentication frame cap).
//! - `scram`, `oauthbearer` (PLAIN is in `authenticator`) — the mechanisms, checked against
//!   the SCRAM credentials in the metadata image (one user store) and a JWKS.
//! - `authorizer` — Kafka's StandardAuthorizer over the ACLs in the metadata image.
//!
//! Brokers authenticate to each other as [`BROKER_PRINCIPAL`], a super user, with a SCRAM
//! credential derived from the cluster secret they already share (on any listener, SASL or
//! not), unless `sasl.mechanism.inter.broker.protocol` names Kafka-style credentials.

pub mod authenticator;
pub mod authorizer;
pub mod fuzzing;
pub mod oauthbearer;
pub mod scram;
pub mod tls;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::config::security::{ListenerSecurity, SecuritySettings};
use crate::config::{BrokerConfig, SaslMechanism, SecretText};
use crate::metadata::records::{ScramCredential, ScramMechanism};
use authorizer::Authorizer;
use oauthbearer::JwtValidator;
use tls::TlsListener;

/// The principal of a connection that has not authenticated (PLAINTEXT, or TLS without a
/// client certificate), as Kafka names it.
pub const ANONYMOUS: &str = "User:ANONYMOUS";
/// The user name brokers log in to each other with (reserved: no client can create it).
pub const BROKER_USER: &str = "__sluice_broker";
/// The brokers' principal: a super user, allowed CLUSTER_ACTION and everything else.
pub const BROKER_PRINCIPAL: &str = "User:__sluice_broker";

/// What the brokers prove to each other: a SCRAM-SHA-512 credential derived from the cluster
/// secret (the secret itself is never sent; SCRAM proves the password without sending it).
struct BrokerLogin {
    credential: ScramCredential,
    password: SecretText,
}

/// Authentication counts per listener (Kafka's `successful-authentication-total` and
/// `failed-authentication-total`).
#[derive(Default)]
pub struct AuthCounts {
    pub successful: AtomicU64,
    pub failed: AtomicU64,
}

/// The broker's security state: TLS configurations, the authorizer, the OAUTHBEARER
/// validator, the brokers' own credential.
pub struct Security {
    pub settings: SecuritySettings,
    tls: HashMap<String, Arc<TlsListener>>,
    pub authorizer: Authorizer,
    pub oauth: Option<Arc<JwtValidator>>,
    /// Keys the made-up SCRAM credentials unknown users get (random per process).
    decoy_key: [u8; 32],
    broker_login: Option<BrokerLogin>,
    /// Per listener name.
    pub counts: HashMap<String, AuthCounts>,
    /// The inter-broker listener's name.
    inter_broker_listener: String,
    /// TLS of the HTTP server on `metrics.listen` (`metrics.ssl.enable`).
    metrics_tls: Option<Arc<TlsListener>>,
    /// TLS of the metadata quorum's controller listener.
    controller_tls: Option<Arc<TlsListener>>,
    /// HTTP Basic credentials recently checked and found right: (user, keyed hash of the
    /// password) → when, so a scraper polling every few seconds does not cost a PBKDF2 each.
    http_logins: parking_lot::Mutex<HashMap<(String, [u8; 32]), std::time::Instant>>,
}

/// How long a checked HTTP Basic login is remembered, and how many are.
const HTTP_LOGIN_TTL: Duration = Duration::from_secs(60);
const MAX_HTTP_LOGINS: usize = 1024;

impl Security {
    /// Reads certificates and the JWKS and derives the brokers' credential; an error is a
    /// sentence for the operator, and the broker does not start.
    pub fn load(config: &BrokerConfig) -> Result<Arc<Security>, String> {
        let settings = config.security.clone();
        let mut tls = HashMap::new();
        for (name, listener) in &settings.listeners {
            if let Some(tls_settings) = &listener.tls {
                let loaded = TlsListener::load(name, tls_settings).map_err(|e| e.to_string())?;
                tls.insert(name.clone(), Arc::new(loaded));
            }
        }
        let oauth = match &settings.oauthbearer {
            Some(o) => Some(Arc::new(JwtValidator::load(o)?)),
            None => None,
        };
        let broker_login = config.cluster_secret.as_ref().map(|secret| {
            let password = base64::Engine::encode(
                &base64::engine::general_purpose::STANDARD,
                secret.derive(b"inter-broker SCRAM password"),
            );
            let salt = secret.derive(b"inter-broker SCRAM salt")[..scram::SALT_BYTES].to_vec();
            let iterations = crate::config::security::DEFAULT_SCRAM_ITERATIONS;
            let salted = scram::salted_password(ScramMechanism::Sha512, password.as_bytes(), &salt, iterations);
            BrokerLogin {
                credential: scram::credential_from_salted(
                    BROKER_USER,
                    ScramMechanism::Sha512,
                    salt,
                    &salted,
                    iterations,
                ),
                password: SecretText::from(password),
            }
        });
        let counts = settings
            .listeners
            .keys()
            .map(|name| (name.clone(), AuthCounts::default()))
            .collect();
        let metrics_tls = match &settings.metrics_tls {
            Some(t) => Some(Arc::new(
                TlsListener::load("metrics.listen", t).map_err(|e| e.to_string())?,
            )),
            None => None,
        };
        let controller_tls = match &settings.controller_tls {
            Some(t) => Some(Arc::new(TlsListener::load("CONTROLLER", t).map_err(|e| e.to_string())?)),
            None => None,
        };
        Ok(Arc::new(Security {
            controller_tls,
            metrics_tls,
            http_logins: parking_lot::Mutex::new(HashMap::new()),
            authorizer: Authorizer::new(settings.authorizer.as_ref()),
            inter_broker_listener: config.listeners.inter_broker.clone(),
            settings,
            tls,
            oauth,
            decoy_key: rand::random(),
            broker_login,
            counts,
        }))
    }

    /// No TLS, no SASL, no authorizer (unit tests).
    pub fn none() -> Arc<Security> {
        Arc::new(Security {
            settings: SecuritySettings {
                listeners: Default::default(),
                authorizer: None,
                connections_max_reauth_ms: 0,
                failed_authentication_delay_ms: 100,
                sasl_server_max_receive_size: 524_288,
                oauthbearer: None,
                inter_broker_sasl: None,
                ssl_reload_check_interval_ms: 5000,
                add_scram: Vec::new(),
                metrics_tls: None,
                metrics_authentication: crate::config::security::MetricsAuthentication::None,
                controller_tls: None,
            },
            tls: HashMap::new(),
            authorizer: Authorizer::disabled(),
            oauth: None,
            decoy_key: [0; 32],
            broker_login: None,
            counts: HashMap::new(),
            inter_broker_listener: String::new(),
            metrics_tls: None,
            controller_tls: None,
            http_logins: parking_lot::Mutex::new(HashMap::new()),
        })
    }

    /// The metadata quorum's TLS, when the controller listener is mapped to SSL: a provider of
    /// the configurations in force, so reloaded certificates reach new quorum connections.
    pub fn quorum_tls(&self) -> Option<sluice_raft_meta::QuorumTls> {
        let tls = self.controller_tls.clone()?;
        Some(sluice_raft_meta::QuorumTls {
            configs: Arc::new(move || (tls.server_config(), tls.client_config())),
        })
    }

    pub fn listener(&self, name: &str) -> Option<&ListenerSecurity> {
        self.settings.listener(name)
    }

    /// The TLS configuration of a listener that uses TLS.
    pub fn tls(&self, listener: &str) -> Option<&Arc<TlsListener>> {
        self.tls.get(listener)
    }

    /// The TLS configuration this broker dials other brokers' inter-broker listener with.
    pub fn inter_broker_tls(&self) -> Option<&Arc<TlsListener>> {
        self.tls.get(&self.inter_broker_listener)
    }

    /// How this broker logs in to another broker: Kafka's inter-broker SASL settings when
    /// given, else the brokers' own credential (when there is a cluster secret).
    pub fn inter_broker_credentials(&self) -> Option<(SaslMechanism, String, SecretText)> {
        if let Some(kafka_style) = &self.settings.inter_broker_sasl {
            return Some((
                kafka_style.mechanism,
                kafka_style.username.clone(),
                kafka_style.password.clone(),
            ));
        }
        self.broker_login
            .as_ref()
            .map(|b| (SaslMechanism::ScramSha512, BROKER_USER.to_string(), b.password.clone()))
    }

    /// A user's SCRAM credential for a mechanism: the brokers' own for [`BROKER_USER`], else
    /// the metadata image's.
    pub fn scram_credential(
        &self,
        image: &crate::metadata::image::MetadataImage,
        user: &str,
        mechanism: ScramMechanism,
    ) -> Option<ScramCredential> {
        if user == BROKER_USER {
            return self
                .broker_login
                .as_ref()
                .filter(|b| b.credential.mechanism == mechanism)
                .map(|b| b.credential.clone());
        }
        image.scram_credentials.get(&(user.to_string(), mechanism)).cloned()
    }

    /// TLS of the HTTP server on `metrics.listen`, when `metrics.ssl.enable` is set.
    pub fn metrics_tls(&self) -> Option<&Arc<TlsListener>> {
        self.metrics_tls.as_ref()
    }

    /// The HTTP Basic credentials a broker's console sends to the other brokers' (their own
    /// user and the password derived from the cluster secret).
    pub fn broker_http_credentials(&self) -> Option<(&'static str, &str)> {
        self.broker_login.as_ref().map(|b| (BROKER_USER, b.password.expose()))
    }

    /// Whether HTTP Basic credentials are a SCRAM user's (or the brokers' own). The first check
    /// of a password costs a PBKDF2 on a blocking thread; a right one is then remembered for a
    /// minute.
    pub async fn check_http_login(
        self: &Arc<Self>,
        image: Arc<crate::metadata::image::MetadataImage>,
        user: &str,
        password: &str,
    ) -> bool {
        use subtle::ConstantTimeEq;
        if user == BROKER_USER {
            return self
                .broker_login
                .as_ref()
                .is_some_and(|b| bool::from(b.password.expose().as_bytes().ct_eq(password.as_bytes())));
        }
        let key = (user.to_string(), self.keyed_hash(password));
        if self
            .http_logins
            .lock()
            .get(&key)
            .is_some_and(|at| at.elapsed() < HTTP_LOGIN_TTL)
        {
            return true;
        }
        let security = self.clone();
        let (user, password) = (user.to_string(), password.to_string());
        let right = tokio::task::spawn_blocking(move || {
            [ScramMechanism::Sha512, ScramMechanism::Sha256]
                .into_iter()
                .find_map(|m| security.scram_credential(&image, &user, m))
                .is_some_and(|c| scram::password_matches(&c, &password))
        })
        .await
        .unwrap_or(false);
        if right {
            let mut logins = self.http_logins.lock();
            if logins.len() >= MAX_HTTP_LOGINS {
                logins.retain(|_, at| at.elapsed() < HTTP_LOGIN_TTL);
                if logins.len() >= MAX_HTTP_LOGINS {
                    logins.clear();
                }
            }
            logins.insert(key, std::time::Instant::now());
        }
        right
    }

    fn keyed_hash(&self, password: &str) -> [u8; 32] {
        use hmac::{Hmac, Mac};
        let mut mac = <Hmac<sha2::Sha256> as Mac>::new_from_slice(&self.decoy_key).expect("any key length");
        mac.update(password.as_bytes());
        mac.finalize().into_bytes().into()
    }

    /// Whether brokers can log in to each other with the cluster secret.
    pub fn has_broker_login(&self) -> bool {
        self.broker_login.is_some()
    }

    fn decoy_key(&self) -> [u8; 32] {
        self.decoy_key
    }

    pub fn count_authentication(&self, listener: &str, succeeded: bool) {
        if let Some(counts) = self.counts.get(listener) {
            let counter = if succeeded { &counts.successful } else { &counts.failed };
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Re-reads certificate files every `ssl.reload.check.interval.ms` and the OAUTHBEARER
    /// JWKS every `sasl.oauthbearer.jwks.endpoint.refresh.ms`, until shutdown.
    pub async fn run_reloads(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let tls_period = Duration::from_millis(self.settings.ssl_reload_check_interval_ms);
        let jwks_period = self.oauth.as_ref().map(|o| o.refresh_interval());
        let mut tls_tick = tokio::time::interval(tls_period);
        tls_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut jwks_tick = tokio::time::interval(jwks_period.unwrap_or(Duration::from_secs(3600)));
        jwks_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        jwks_tick.tick().await; // the JWKS was read at start
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = tls_tick.tick(), if !self.tls.is_empty() || self.metrics_tls.is_some() || self.controller_tls.is_some() => {
                    let security = self.clone();
                    let _ = tokio::task::spawn_blocking(move || {
                        for listener in security.tls.values().chain(&security.metrics_tls).chain(&security.controller_tls) {
                            listener.reload_if_changed();
                        }
                    }).await;
                }
                _ = jwks_tick.tick(), if self.oauth.is_some() => {
                    if let Some(oauth) = self.oauth.clone() {
                        let _ = tokio::task::spawn_blocking(move || oauth.refresh()).await;
                    }
                }
            }
        }
    }
}
