//! Kafka's security settings, by Kafka's names: each listener's security protocol (from
//! `listener.security.protocol.map`), its TLS settings (`ssl.*`) and SASL mechanisms
//! (`sasl.enabled.mechanisms`), each overridable per listener as
//! `listener.name.<listener>.<setting>`; the authorizer (`authorizer.class.name`,
//! `super.users`, `allow.everyone.if.no.acl.found`); re-authentication and the failed
//! authentication delay; OAUTHBEARER validation (KIP-768's `sasl.oauthbearer.*`); how this
//! broker authenticates to the others (`sasl.mechanism.inter.broker.protocol` with
//! `listener.name.<listener>.<mechanism>.sasl.jaas.config`, else the cluster secret); and the
//! first SCRAM users (`--add-scram`).
//!
//! Only parsing and checking happen here, without touching a file: certificates are read
//! where TLS is set up (`security::tls`), so that a reload reads them the same way.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use super::{ConfigError, SecretText};

/// Kafka's security protocols, one per listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub fn parse(name: &str) -> Option<SecurityProtocol> {
        Some(match name.trim().to_ascii_uppercase().as_str() {
            "PLAINTEXT" => SecurityProtocol::Plaintext,
            "SSL" => SecurityProtocol::Ssl,
            "SASL_PLAINTEXT" => SecurityProtocol::SaslPlaintext,
            "SASL_SSL" => SecurityProtocol::SaslSsl,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    pub fn uses_sasl(self) -> bool {
        matches!(self, SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl)
    }
}

impl fmt::Display for SecurityProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The SASL mechanisms Sluice serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SaslMechanism {
    Plain,
    ScramSha256,
    ScramSha512,
    OAuthBearer,
}

impl SaslMechanism {
    pub const ALL: [SaslMechanism; 4] = [
        SaslMechanism::Plain,
        SaslMechanism::ScramSha256,
        SaslMechanism::ScramSha512,
        SaslMechanism::OAuthBearer,
    ];

    pub fn parse(name: &str) -> Option<SaslMechanism> {
        SaslMechanism::ALL.into_iter().find(|m| m.name() == name.trim())
    }

    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
            SaslMechanism::OAuthBearer => "OAUTHBEARER",
        }
    }

    pub fn is_scram(self) -> bool {
        matches!(self, SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512)
    }
}

impl fmt::Display for SaslMechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `ssl.keystore.type` / `ssl.truststore.type`. JKS is refused (rustls reads PEM and PKCS12).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreType {
    Pem,
    Pkcs12,
    /// Not given: told apart by the file's first bytes (PEM text, else PKCS12; a JKS file is
    /// refused with how to convert it).
    FromFile,
}

/// `ssl.client.auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    None,
    Requested,
    Required,
}

/// TLS versions by `ssl.enabled.protocols`' names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsVersion {
    Tls12,
    Tls13,
}

/// One listener's TLS settings, as given (files are read by `security::tls`).
#[derive(Debug, Clone)]
pub struct TlsSettings {
    pub keystore_type: StoreType,
    pub keystore_location: Option<PathBuf>,
    pub keystore_password: Option<SecretText>,
    pub key_password: Option<SecretText>,
    /// KIP-651: the certificate chain and key as PEM text in the setting itself.
    pub keystore_certificate_chain: Option<SecretText>,
    pub keystore_key: Option<SecretText>,
    pub truststore_type: StoreType,
    pub truststore_location: Option<PathBuf>,
    pub truststore_password: Option<SecretText>,
    pub truststore_certificates: Option<SecretText>,
    pub client_auth: ClientAuth,
    pub enabled_protocols: Vec<TlsVersion>,
    /// IANA names (`TLS_AES_128_GCM_SHA256`, `TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384`, ...);
    /// empty: rustls's defaults.
    pub cipher_suites: Vec<String>,
    /// `ssl.principal.mapping.rules`, checked here and applied by `security::principal`.
    pub principal_mapping_rules: String,
    /// `ssl.endpoint.identification.algorithm=https` (the default): as a client of another
    /// broker, check that its certificate names the host dialled.
    pub endpoint_identification: bool,
}

/// One listener's security: its protocol and what that protocol needs.
#[derive(Debug, Clone)]
pub struct ListenerSecurity {
    pub protocol: SecurityProtocol,
    /// Present when the protocol uses TLS.
    pub tls: Option<TlsSettings>,
    /// The enabled mechanisms, in the order given; empty unless the protocol uses SASL.
    pub sasl_mechanisms: Vec<SaslMechanism>,
}

/// `authorizer.class.name` set: ACLs are enforced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorizerSettings {
    /// `super.users`, as `Type:name` principals.
    pub super_users: Vec<String>,
    pub allow_everyone_if_no_acl_found: bool,
}

/// KIP-768's server-side OAUTHBEARER validation settings.
#[derive(Debug, Clone)]
pub struct OAuthBearerSettings {
    /// `file:///path`, a plain path, or an `http(s)://` URL.
    pub jwks_endpoint_url: String,
    pub expected_audience: Vec<String>,
    pub expected_issuer: Option<String>,
    pub sub_claim_name: String,
    pub scope_claim_name: String,
    pub clock_skew_seconds: u64,
    pub jwks_refresh_ms: u64,
}

/// How this broker authenticates to other brokers' SASL listeners when told to with Kafka's
/// settings (otherwise it proves the cluster secret).
#[derive(Debug, Clone)]
pub struct InterBrokerSasl {
    pub mechanism: SaslMechanism,
    pub username: String,
    pub password: SecretText,
}

/// One `--add-scram` entry: a SCRAM user created when the cluster has none of that name.
#[derive(Debug, Clone)]
pub struct AddScram {
    pub mechanism: SaslMechanism,
    pub name: String,
    pub password: SecretText,
    pub iterations: u32,
}

/// Everything security, resolved.
#[derive(Debug, Clone)]
pub struct SecuritySettings {
    pub listeners: BTreeMap<String, ListenerSecurity>,
    pub authorizer: Option<AuthorizerSettings>,
    /// `connections.max.reauth.ms`: a SASL session's lifetime (0: no limit unless the
    /// credential expires, as an OAUTHBEARER token does).
    pub connections_max_reauth_ms: u64,
    /// `connection.failed.authentication.delay.ms`: how long a failed authentication waits
    /// before its answer and the close (KIP-306), so guessing is slow.
    pub failed_authentication_delay_ms: u64,
    /// `sasl.server.max.receive.size`: the largest frame a connection may send before it has
    /// authenticated.
    pub sasl_server_max_receive_size: usize,
    pub oauthbearer: Option<OAuthBearerSettings>,
    pub inter_broker_sasl: Option<InterBrokerSasl>,
    /// `ssl.reload.check.interval.ms` (Sluice's own): how often certificate files are checked
    /// for changes.
    pub ssl_reload_check_interval_ms: u64,
    pub add_scram: Vec<AddScram>,
    /// `metrics.ssl.enable` (Sluice's own): the HTTP server on `metrics.listen` speaks TLS with
    /// the broker-wide `ssl.*` settings.
    pub metrics_tls: Option<TlsSettings>,
    /// `metrics.authentication` (Sluice's own): whether the HTTP server asks for credentials.
    pub metrics_authentication: MetricsAuthentication,
    /// The controller listener (`controller.listener.names`, the metadata quorum's port) mapped
    /// to SSL: mutual TLS between quorum members on top of the cluster secret, each member's
    /// certificate pinned to its `--voters` host. Client certificates are always required.
    pub controller_tls: Option<TlsSettings>,
}

/// Who may read `/metrics` and the console.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsAuthentication {
    /// Anyone who reaches `metrics.listen`.
    None,
    /// HTTP Basic credentials of a SCRAM user (checked as SASL/PLAIN checks them), who also
    /// needs DESCRIBE on the cluster when an authorizer is on.
    Scram,
}

impl SecuritySettings {
    pub fn listener(&self, name: &str) -> Option<&ListenerSecurity> {
        self.listeners.get(name)
    }

    /// Whether any listener authenticates clients with SASL.
    pub fn any_sasl(&self) -> bool {
        self.listeners.values().any(|l| l.protocol.uses_sasl())
    }
}

/// The settings a listener may override as `listener.name.<listener>.<setting>`.
pub const PER_LISTENER_SETTINGS: &[&str] = &[
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "ssl.key.password",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.password",
    "ssl.truststore.certificates",
    "ssl.client.auth",
    "ssl.enabled.protocols",
    "ssl.protocol",
    "ssl.cipher.suites",
    "ssl.principal.mapping.rules",
    "ssl.endpoint.identification.algorithm",
    "sasl.enabled.mechanisms",
    "connections.max.reauth.ms",
];

/// Per-mechanism settings a listener may carry as `listener.name.<listener>.<mechanism>.<setting>`
/// (mechanism in lower case, as Kafka writes it). Only the JAAS username/password is read (the
/// inter-broker credentials); the callback handler classes are accepted for Kafka
/// configurations to carry over, since Sluice always validates as Kafka's validating handlers do.
pub const PER_MECHANISM_SETTINGS: &[&str] = &[
    "sasl.jaas.config",
    "sasl.server.callback.handler.class",
    "sasl.login.callback.handler.class",
    "connections.max.reauth.ms",
];

/// Whether a setting holds a secret: never logged, never echoed by DescribeConfigs (Kafka's
/// PASSWORD type).
pub fn is_sensitive(key: &str) -> bool {
    let base = key.rsplit_once(".sasl.jaas.config").map_or(key, |_| "sasl.jaas.config");
    let base = PER_LISTENER_SETTINGS
        .iter()
        .find(|s| base.ends_with(*s))
        .copied()
        .unwrap_or(base);
    matches!(
        base,
        "ssl.keystore.password"
            | "ssl.key.password"
            | "ssl.truststore.password"
            | "ssl.keystore.key"
            | "ssl.keystore.certificate.chain"
            | "ssl.truststore.certificates"
            | "sasl.jaas.config"
    )
}

/// Whether `key` is a `listener.name.<listener>.<setting>` Sluice accepts.
pub fn is_per_listener_key(key: &str) -> bool {
    let Some(rest) = key.strip_prefix("listener.name.") else {
        return false;
    };
    let Some((listener, setting)) = rest.split_once('.') else {
        return false;
    };
    if listener.is_empty() {
        return false;
    }
    if PER_LISTENER_SETTINGS.contains(&setting) {
        return true;
    }
    setting.split_once('.').is_some_and(|(mechanism, setting)| {
        SaslMechanism::parse(&mechanism.to_ascii_uppercase()).is_some() && PER_MECHANISM_SETTINGS.contains(&setting)
    })
}

fn invalid(key: &str, value: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::InvalidValue {
        key: key.to_string(),
        value: if is_sensitive(key) {
            "<redacted>".into()
        } else {
            value.to_string()
        },
        reason: reason.into(),
    }
}

/// Reads settings: `value(key)` is the plain setting or its default, `secret(key)` a
/// sensitive one if set.
pub struct SettingsView<'a> {
    pub value: &'a dyn Fn(&str) -> String,
    pub is_set: &'a dyn Fn(&str) -> bool,
    pub secret: &'a dyn Fn(&str) -> Option<SecretText>,
}

impl SettingsView<'_> {
    /// The listener's own value of `key` (`listener.name.<listener>.<key>`), else the broker's
    /// (the broker's alone for the listener named "").
    fn for_listener(&self, listener: &str, key: &str) -> String {
        let own = format!("listener.name.{}.{key}", listener.to_ascii_lowercase());
        if !listener.is_empty() && (self.is_set)(&own) {
            (self.value)(&own)
        } else {
            (self.value)(key)
        }
    }

    fn secret_for_listener(&self, listener: &str, key: &str) -> Option<SecretText> {
        let own = format!("listener.name.{}.{key}", listener.to_ascii_lowercase());
        (!listener.is_empty())
            .then(|| (self.secret)(&own))
            .flatten()
            .or_else(|| (self.secret)(key))
    }
}

/// Resolves every listener's security and the broker-wide security settings.
pub fn resolve(
    view: &SettingsView<'_>,
    protocols: &[(String, SecurityProtocol)],
    inter_broker_listener: &str,
    controller: (&str, SecurityProtocol),
    add_scram: Vec<AddScram>,
) -> Result<SecuritySettings, ConfigError> {
    let mut listeners = BTreeMap::new();
    for (name, protocol) in protocols {
        let tls = protocol.uses_tls().then(|| tls_settings(view, name)).transpose()?;
        let sasl_mechanisms = if protocol.uses_sasl() {
            sasl_mechanisms(view, name)?
        } else {
            Vec::new()
        };
        listeners.insert(
            name.clone(),
            ListenerSecurity {
                protocol: *protocol,
                tls,
                sasl_mechanisms,
            },
        );
    }
    let oauth_enabled = listeners
        .values()
        .any(|l| l.sasl_mechanisms.contains(&SaslMechanism::OAuthBearer));
    let oauthbearer = oauth_enabled.then(|| oauthbearer_settings(view)).transpose()?;
    let inter_broker_sasl = inter_broker_sasl(view, &listeners, inter_broker_listener)?;
    let controller_tls = match controller.1 {
        SecurityProtocol::Plaintext => None,
        SecurityProtocol::Ssl => {
            let mut tls = tls_settings(view, controller.0)?;
            tls.client_auth = ClientAuth::Required;
            if tls.truststore_location.is_none() && tls.truststore_certificates.is_none() {
                return Err(invalid(
                    "ssl.truststore.location",
                    "",
                    format!("the controller listener {} uses SSL, which needs a truststore to check the other quorum members' certificates; set listener.name.{}.ssl.truststore.location (or ssl.truststore.location)", controller.0, controller.0.to_ascii_lowercase()),
                ));
            }
            Some(tls)
        }
        other => {
            return Err(invalid(
                "listener.security.protocol.map",
                other.name(),
                format!("the controller listener {} may be PLAINTEXT or SSL: quorum members authenticate each other with the cluster secret, not SASL", controller.0),
            ))
        }
    };
    let metrics_tls = ((view.value)("metrics.ssl.enable").trim() == "true")
        .then(|| tls_settings(view, ""))
        .transpose()?;
    let metrics_authentication = match (view.value)("metrics.authentication")
        .trim()
        .to_ascii_lowercase()
        .as_str()
    {
        "" | "none" => MetricsAuthentication::None,
        "scram" => MetricsAuthentication::Scram,
        other => {
            return Err(invalid(
                "metrics.authentication",
                other,
                "use none, or scram (HTTP Basic credentials of a SCRAM user)",
            ))
        }
    };
    Ok(SecuritySettings {
        controller_tls,
        metrics_tls,
        metrics_authentication,
        authorizer: authorizer_settings(view)?,
        connections_max_reauth_ms: parse_u64(view, "connections.max.reauth.ms")?,
        failed_authentication_delay_ms: parse_u64(view, "connection.failed.authentication.delay.ms")?,
        sasl_server_max_receive_size: parse_u64(view, "sasl.server.max.receive.size")?.max(1) as usize,
        ssl_reload_check_interval_ms: parse_u64(view, "ssl.reload.check.interval.ms")?.max(100),
        oauthbearer,
        inter_broker_sasl,
        listeners,
        add_scram,
    })
}

fn parse_u64(view: &SettingsView<'_>, key: &str) -> Result<u64, ConfigError> {
    let value = (view.value)(key);
    value
        .trim()
        .parse()
        .map_err(|_| invalid(key, &value, "expected a whole number of 0 or more"))
}

fn list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

fn store_type(key: &str, value: &str) -> Result<StoreType, ConfigError> {
    match value.trim().to_ascii_uppercase().as_str() {
        "" => Ok(StoreType::FromFile),
        "PEM" => Ok(StoreType::Pem),
        "PKCS12" => Ok(StoreType::Pkcs12),
        "JKS" => Err(invalid(key, value, JKS_REFUSAL)),
        other => Err(invalid(
            key,
            value,
            format!("{other} is not a store type Sluice reads; use PEM or PKCS12"),
        )),
    }
}

/// What a JKS store's owner is told.
pub const JKS_REFUSAL: &str = "Sluice reads PEM and PKCS12 stores, not JKS; convert the store with `keytool -importkeystore -srckeystore server.keystore.jks -destkeystore server.keystore.p12 -deststoretype PKCS12` and set ssl.keystore.type=PKCS12 (a store keytool wrote since Java 9 may already be PKCS12 under a .jks name: then set the type to PKCS12)";

fn tls_settings(view: &SettingsView<'_>, listener: &str) -> Result<TlsSettings, ConfigError> {
    let get = |key: &str| view.for_listener(listener, key);
    let secret = |key: &str| view.secret_for_listener(listener, key);
    let path = |key: &str| {
        Some(get(key))
            .filter(|v| !v.trim().is_empty())
            .map(|v| PathBuf::from(v.trim()))
    };
    let client_auth = match get("ssl.client.auth").trim().to_ascii_lowercase().as_str() {
        "none" | "" => ClientAuth::None,
        "requested" => ClientAuth::Requested,
        "required" => ClientAuth::Required,
        _ => {
            return Err(invalid(
                "ssl.client.auth",
                &get("ssl.client.auth"),
                "use none, requested or required",
            ))
        }
    };
    let mut enabled_protocols = Vec::new();
    for name in list(&get("ssl.enabled.protocols")) {
        enabled_protocols.push(match name.as_str() {
            "TLSv1.2" => TlsVersion::Tls12,
            "TLSv1.3" => TlsVersion::Tls13,
            other => {
                return Err(invalid(
                    "ssl.enabled.protocols",
                    &get("ssl.enabled.protocols"),
                    format!("{other} is not offered; Sluice speaks TLSv1.2 and TLSv1.3 (older versions are insecure)"),
                ))
            }
        });
    }
    if enabled_protocols.is_empty() {
        return Err(invalid(
            "ssl.enabled.protocols",
            "",
            "names no protocol; use TLSv1.2,TLSv1.3",
        ));
    }
    let rules = get("ssl.principal.mapping.rules");
    crate::config::principal_rules::parse(&rules)
        .map_err(|reason| invalid("ssl.principal.mapping.rules", &rules, reason))?;
    let keystore = TlsSettings {
        keystore_type: store_type("ssl.keystore.type", &get("ssl.keystore.type"))?,
        keystore_location: path("ssl.keystore.location"),
        keystore_password: secret("ssl.keystore.password"),
        key_password: secret("ssl.key.password"),
        keystore_certificate_chain: secret("ssl.keystore.certificate.chain"),
        keystore_key: secret("ssl.keystore.key"),
        truststore_type: store_type("ssl.truststore.type", &get("ssl.truststore.type"))?,
        truststore_location: path("ssl.truststore.location"),
        truststore_password: secret("ssl.truststore.password"),
        truststore_certificates: secret("ssl.truststore.certificates"),
        client_auth,
        enabled_protocols,
        cipher_suites: list(&get("ssl.cipher.suites")),
        principal_mapping_rules: rules,
        endpoint_identification: !get("ssl.endpoint.identification.algorithm").trim().is_empty(),
    };
    let inline = keystore.keystore_certificate_chain.is_some() || keystore.keystore_key.is_some();
    match (&keystore.keystore_location, inline) {
        (None, false) => Err(invalid(
            "ssl.keystore.location",
            "",
            format!(
                "listener {listener} uses TLS but has no certificate; set ssl.keystore.location (a PEM file with the certificate chain and its private key, or a PKCS12 store), or ssl.keystore.certificate.chain and ssl.keystore.key"
            ),
        )),
        (Some(_), true) => Err(invalid(
            "ssl.keystore.certificate.chain",
            "",
            "give the certificate either as ssl.keystore.location or as ssl.keystore.certificate.chain with ssl.keystore.key, not both",
        )),
        (None, true) if keystore.keystore_certificate_chain.is_none() || keystore.keystore_key.is_none() => Err(invalid(
            "ssl.keystore.key",
            "",
            "ssl.keystore.certificate.chain and ssl.keystore.key go together; set both",
        )),
        _ => Ok(keystore),
    }
}

fn sasl_mechanisms(view: &SettingsView<'_>, listener: &str) -> Result<Vec<SaslMechanism>, ConfigError> {
    let given = view.for_listener(listener, "sasl.enabled.mechanisms");
    let mut out = Vec::new();
    for name in list(&given) {
        let Some(mechanism) = SaslMechanism::parse(&name) else {
            let why = if name == "GSSAPI" {
                "GSSAPI (Kerberos) is not supported".to_string()
            } else {
                format!("{name} is not a mechanism Sluice serves")
            };
            return Err(invalid(
                "sasl.enabled.mechanisms",
                &given,
                format!("{why}; use SCRAM-SHA-256, SCRAM-SHA-512, PLAIN or OAUTHBEARER"),
            ));
        };
        if !out.contains(&mechanism) {
            out.push(mechanism);
        }
    }
    if out.is_empty() {
        return Err(invalid(
            "sasl.enabled.mechanisms",
            &given,
            format!("listener {listener} uses SASL but enables no mechanism; e.g. SCRAM-SHA-512"),
        ));
    }
    Ok(out)
}

fn authorizer_settings(view: &SettingsView<'_>) -> Result<Option<AuthorizerSettings>, ConfigError> {
    let class = (view.value)("authorizer.class.name");
    let class = class.trim();
    if class.is_empty() {
        return Ok(None);
    }
    const ACCEPTED: &[&str] = &[
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "kafka.security.authorizer.AclAuthorizer",
        "sluice",
    ];
    if !ACCEPTED.contains(&class) {
        return Err(invalid(
            "authorizer.class.name",
            class,
            "Sluice has one authorizer, Kafka's StandardAuthorizer semantics; set org.apache.kafka.metadata.authorizer.StandardAuthorizer (or leave it empty for none)",
        ));
    }
    let mut super_users = Vec::new();
    let given = (view.value)("super.users");
    for principal in given.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        if !principal.contains(':') {
            return Err(invalid(
                "super.users",
                &given,
                format!("{principal:?} is not a principal; write Type:name, e.g. User:admin, separated by ;"),
            ));
        }
        super_users.push(principal.to_string());
    }
    Ok(Some(AuthorizerSettings {
        super_users,
        allow_everyone_if_no_acl_found: (view.value)("allow.everyone.if.no.acl.found").trim() == "true",
    }))
}

fn oauthbearer_settings(view: &SettingsView<'_>) -> Result<OAuthBearerSettings, ConfigError> {
    let url = (view.value)("sasl.oauthbearer.jwks.endpoint.url");
    if url.trim().is_empty() {
        return Err(invalid(
            "sasl.oauthbearer.jwks.endpoint.url",
            "",
            "OAUTHBEARER is enabled, so tokens need keys to be checked against: set the JWKS location (file:///path/jwks.json or https://issuer/.well-known/jwks.json); Sluice never accepts unsigned tokens",
        ));
    }
    let skew = parse_u64(view, "sasl.oauthbearer.clock.skew.seconds")?;
    Ok(OAuthBearerSettings {
        jwks_endpoint_url: url.trim().to_string(),
        expected_audience: list(&(view.value)("sasl.oauthbearer.expected.audience")),
        expected_issuer: Some((view.value)("sasl.oauthbearer.expected.issuer"))
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty()),
        sub_claim_name: (view.value)("sasl.oauthbearer.sub.claim.name").trim().to_string(),
        scope_claim_name: (view.value)("sasl.oauthbearer.scope.claim.name").trim().to_string(),
        clock_skew_seconds: skew,
        jwks_refresh_ms: parse_u64(view, "sasl.oauthbearer.jwks.endpoint.refresh.ms")?.max(1000),
    })
}

fn inter_broker_sasl(
    view: &SettingsView<'_>,
    listeners: &BTreeMap<String, ListenerSecurity>,
    inter_broker_listener: &str,
) -> Result<Option<InterBrokerSasl>, ConfigError> {
    let given = (view.value)("sasl.mechanism.inter.broker.protocol");
    let given = given.trim();
    if given.is_empty() {
        return Ok(None);
    }
    let key = "sasl.mechanism.inter.broker.protocol";
    let mechanism = SaslMechanism::parse(given).ok_or_else(|| {
        invalid(
            key,
            given,
            "not a mechanism Sluice speaks to other brokers; use SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN, or leave it empty to let brokers authenticate each other with the cluster secret",
        )
    })?;
    if mechanism == SaslMechanism::OAuthBearer {
        return Err(invalid(
            key,
            given,
            "brokers do not fetch tokens; use SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN, or leave it empty for the cluster secret",
        ));
    }
    let Some(listener) = listeners.get(inter_broker_listener) else {
        return Ok(None);
    };
    if !listener.protocol.uses_sasl() {
        return Ok(None);
    }
    if !listener.sasl_mechanisms.contains(&mechanism) {
        return Err(invalid(
            key,
            given,
            format!("the inter-broker listener {inter_broker_listener} does not enable {mechanism}; add it to sasl.enabled.mechanisms"),
        ));
    }
    let jaas_key = format!(
        "listener.name.{}.{}.sasl.jaas.config",
        inter_broker_listener.to_ascii_lowercase(),
        mechanism.name().to_ascii_lowercase()
    );
    let Some(jaas) = (view.secret)(&jaas_key) else {
        return Err(invalid(
            key,
            given,
            format!("set {jaas_key} with the username and password this broker logs in with, e.g. org.apache.kafka.common.security.scram.ScramLoginModule required username=\"admin\" password=\"...\";"),
        ));
    };
    let (username, password) = parse_jaas_credentials(jaas.expose())
        .ok_or_else(|| invalid(&jaas_key, "", "it has no username=\"...\" and password=\"...\" options"))?;
    Ok(Some(InterBrokerSasl {
        mechanism,
        username,
        password: SecretText::from(password),
    }))
}

/// The `username` and `password` options of a JAAS login module line
/// (`org.apache.kafka...LoginModule required username="u" password="p";`).
pub fn parse_jaas_credentials(jaas: &str) -> Option<(String, String)> {
    let mut username = None;
    let mut password = None;
    let mut rest = jaas;
    while let Some(eq) = rest.find('=') {
        let key = rest[..eq].split_whitespace().last().unwrap_or("");
        let after = rest[eq + 1..].trim_start();
        let (value, remaining) = if let Some(quoted) = after.strip_prefix('"') {
            let end = quoted.find('"')?;
            (&quoted[..end], &quoted[end + 1..])
        } else {
            let end = after
                .find(|c: char| c.is_whitespace() || c == ';')
                .unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        match key {
            "username" => username = Some(value.to_string()),
            "password" => password = Some(value.to_string()),
            _ => {}
        }
        rest = remaining;
    }
    Some((username?, password?))
}

/// Iterations a `--add-scram` user gets when none are given (Kafka's default, 4096, the
/// minimum SCRAM allows).
pub const DEFAULT_SCRAM_ITERATIONS: u32 = 4096;
/// The most iterations a SCRAM credential may have (Kafka's limit).
pub const MAX_SCRAM_ITERATIONS: u32 = 16384;

/// Parses `--add-scram` entries in Kafka's `kafka-storage format --add-scram` syntax:
/// `SCRAM-SHA-512=[name=admin,password=admin-secret]`, values optionally in double quotes,
/// `iterations=N` optional. Several entries may be given in one value (the environment's
/// `SLUICE_ADD_SCRAM`), separated by whitespace, `;` or `,` between brackets.
pub fn parse_add_scram(given: &str) -> Result<Vec<AddScram>, ConfigError> {
    let bad = |reason: String| ConfigError::InvalidValue {
        key: "--add-scram".into(),
        value: "<redacted>".into(),
        reason,
    };
    let mut out = Vec::new();
    let mut rest = given.trim();
    while !rest.is_empty() {
        let (mechanism, after) = rest.split_once("=[").ok_or_else(|| {
            bad("write MECHANISM=[name=...,password=...], e.g. SCRAM-SHA-512=[name=admin,password=admin-secret]".into())
        })?;
        let mechanism = mechanism.trim_matches(|c: char| c.is_whitespace() || c == ';' || c == ',');
        let mechanism = SaslMechanism::parse(mechanism)
            .filter(|m| m.is_scram())
            .ok_or_else(|| bad(format!("{mechanism:?} is not SCRAM-SHA-256 or SCRAM-SHA-512")))?;
        let (fields, remaining) = split_bracketed(after).ok_or_else(|| bad("an entry has no closing ]".into()))?;
        let (mut name, mut password, mut iterations) = (None, None, DEFAULT_SCRAM_ITERATIONS);
        for (key, value) in fields {
            match key.as_str() {
                "name" => name = Some(value),
                "password" => password = Some(value),
                "iterations" => {
                    iterations = value
                        .parse()
                        .ok()
                        .filter(|n| (DEFAULT_SCRAM_ITERATIONS..=MAX_SCRAM_ITERATIONS).contains(n))
                        .ok_or_else(|| {
                            bad(format!(
                                "iterations must be a number from {DEFAULT_SCRAM_ITERATIONS} to {MAX_SCRAM_ITERATIONS}"
                            ))
                        })?
                }
                other => {
                    return Err(bad(format!(
                        "{other:?} is not understood; give name, password and optionally iterations"
                    )))
                }
            }
        }
        let name = name
            .filter(|n| !n.is_empty())
            .ok_or_else(|| bad("an entry has no name".into()))?;
        let password = password
            .filter(|p| !p.is_empty())
            .ok_or_else(|| bad(format!("the entry for {name} has no password")))?;
        out.push(AddScram {
            mechanism,
            name,
            password: SecretText::from(password),
            iterations,
        });
        rest = remaining.trim_start_matches(|c: char| c.is_whitespace() || c == ';' || c == ',');
    }
    Ok(out)
}

/// `key=value,...]` (values may be "quoted"): the pairs and what follows the `]`.
fn split_bracketed(s: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut pairs = Vec::new();
    let mut rest = s;
    loop {
        rest = rest.trim_start_matches([' ', ',']);
        if let Some(after) = rest.strip_prefix(']') {
            return Some((pairs, after));
        }
        let eq = rest.find('=')?;
        let key = rest[..eq].trim().to_ascii_lowercase();
        let after = &rest[eq + 1..];
        let (value, remaining) = if let Some(quoted) = after.strip_prefix('"') {
            let end = quoted.find('"')?;
            (quoted[..end].to_string(), &quoted[end + 1..])
        } else {
            let end = after.find([',', ']'])?;
            (after[..end].trim().to_string(), &after[end..])
        };
        pairs.push((key, value));
        rest = remaining;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_scram_reads_kafka_storage_syntax() {
        let users = parse_add_scram(
            r#"SCRAM-SHA-512=[name=admin,password=admin-secret] SCRAM-SHA-256=[name="bob",password="p,w]d",iterations=8192]"#,
        )
        .unwrap();
        assert_eq!(users.len(), 2);
        assert_eq!(
            (users[0].mechanism, users[0].name.as_str()),
            (SaslMechanism::ScramSha512, "admin")
        );
        assert_eq!(users[0].password.expose(), "admin-secret");
        assert_eq!(users[0].iterations, 4096);
        assert_eq!((users[1].name.as_str(), users[1].password.expose()), ("bob", "p,w]d"));
        assert_eq!(users[1].iterations, 8192);
    }

    #[test]
    fn add_scram_refuses_what_it_cannot_use_without_echoing_the_password() {
        for bad in [
            "PLAIN=[name=a,password=b]",
            "SCRAM-SHA-512=[name=a]",
            "SCRAM-SHA-512=[password=hunter2]",
            "SCRAM-SHA-512=[name=a,password=hunter2",
            "SCRAM-SHA-512=[name=a,password=hunter2,iterations=10]",
            "admin:hunter2",
        ] {
            let err = parse_add_scram(bad).unwrap_err().to_string();
            assert!(!err.contains("hunter2"), "{err}");
        }
    }

    #[test]
    fn jaas_credentials_are_read_from_a_login_module_line() {
        let (u, p) = parse_jaas_credentials(
            r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="s3 cret";"#,
        )
        .unwrap();
        assert_eq!((u.as_str(), p.as_str()), ("admin", "s3 cret"));
        assert!(parse_jaas_credentials("org.x.LoginModule required;").is_none());
    }

    #[test]
    fn listener_prefixed_keys_and_secrets_are_recognised() {
        assert!(is_per_listener_key("listener.name.sasl_ssl.ssl.keystore.location"));
        assert!(is_per_listener_key(
            "listener.name.internal.scram-sha-512.sasl.jaas.config"
        ));
        assert!(!is_per_listener_key("listener.name.internal.num.partitions"));
        assert!(!is_per_listener_key("listener.name..ssl.keystore.location"));
        assert!(is_sensitive("ssl.keystore.password"));
        assert!(is_sensitive("listener.name.x.ssl.key.password"));
        assert!(is_sensitive("listener.name.x.plain.sasl.jaas.config"));
        assert!(!is_sensitive("ssl.keystore.location"));
    }
}
