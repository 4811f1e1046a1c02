//! Kafka's listener model: `listeners` (named addresses to bind), `advertised.listeners` (what
//! each listener tells clients to dial), `listener.security.protocol.map` and
//! `inter.broker.listener.name` (the listener followers fetch through). A client is answered
//! with the addresses of the listener it connected to, so a node can be reached by one name
//! inside a private network and by another from outside.
//!
//! `--listen` / `--advertise` remain shorthands for a single listener named `PLAINTEXT`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};

use super::security::SecurityProtocol;
use super::ConfigError;

/// The listener a node has when nothing names one: `PLAINTEXT://127.0.0.1:9092`.
pub const DEFAULT_LISTENER_NAME: &str = "PLAINTEXT";
const DEFAULT_BIND: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9092);

/// Kafka's default `listener.security.protocol.map`: every protocol name maps to itself.
pub const DEFAULT_SECURITY_PROTOCOL_MAP: &str =
    "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL";

/// One named Kafka listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    /// Upper-cased, as Kafka normalises listener names.
    pub name: String,
    pub bind: SocketAddr,
    pub advertised_host: String,
    pub advertised_port: i32,
    /// From `listener.security.protocol.map`.
    pub protocol: SecurityProtocol,
}

/// The listener settings as given: `--listen`/`--advertise` and the four `--set` keys.
pub struct ListenerSettings<'a> {
    pub listen: Option<SocketAddr>,
    pub advertise: Option<&'a str>,
    pub listeners: &'a str,
    pub advertised_listeners: &'a str,
    pub security_protocol_map: &'a str,
    pub inter_broker_listener_name: &'a str,
}

/// A node's listeners and which of them brokers use to reach each other.
#[derive(Debug, Clone)]
pub struct Listeners {
    pub all: Vec<Listener>,
    pub inter_broker: String,
}

impl Listeners {
    pub fn resolve(s: &ListenerSettings<'_>) -> Result<Listeners, ConfigError> {
        let bound = bound_listeners(s)?;
        let advertised = advertised_listeners(s, &bound)?;
        let protocols = security_protocols(s.security_protocol_map, &bound)?;
        let all: Vec<Listener> = bound
            .into_iter()
            .zip(protocols)
            .map(|((name, given_host, bind), protocol)| {
                let (advertised_host, advertised_port) = match advertised.iter().find(|(n, _, _)| *n == name) {
                    Some((_, host, port)) => (host.clone(), *port),
                    None => (advertisable_host(&name, &given_host, bind)?, i32::from(bind.port())),
                };
                Ok(Listener {
                    name,
                    bind,
                    advertised_host,
                    advertised_port,
                    protocol,
                })
            })
            .collect::<Result<_, ConfigError>>()?;
        let inter_broker = inter_broker_listener(s.inter_broker_listener_name, &all)?;
        Ok(Listeners { all, inter_broker })
    }

    /// The listener brokers reach each other through.
    pub fn inter_broker_listener(&self) -> &Listener {
        self.all
            .iter()
            .find(|l| l.name == self.inter_broker)
            .expect("resolve checks that the inter-broker listener is one of the listeners")
    }

    /// `listeners` as Kafka writes it, for DescribeConfigs.
    pub fn describe_bound(&self) -> String {
        let entries = self.all.iter().map(|l| format!("{}://{}", l.name, l.bind));
        entries.collect::<Vec<_>>().join(",")
    }

    /// `advertised.listeners` as Kafka writes it, for DescribeConfigs.
    pub fn describe_advertised(&self) -> String {
        let entries = self
            .all
            .iter()
            .map(|l| format!("{}://{}", l.name, join_host_port(&l.advertised_host, l.advertised_port)));
        entries.collect::<Vec<_>>().join(",")
    }
}

fn join_host_port(host: &str, port: i32) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn invalid(key: &str, value: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::InvalidValue {
        key: key.to_string(),
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// `(name, host as given, bind address)` per listener.
fn bound_listeners(s: &ListenerSettings<'_>) -> Result<Vec<(String, String, SocketAddr)>, ConfigError> {
    if s.listeners.trim().is_empty() {
        let bind = s.listen.unwrap_or(DEFAULT_BIND);
        return Ok(vec![(DEFAULT_LISTENER_NAME.to_string(), bind.ip().to_string(), bind)]);
    }
    if s.listen.is_some() {
        return Err(invalid(
            "listeners",
            s.listeners,
            "--listen gives the same thing; use one or the other",
        ));
    }
    let mut out: Vec<(String, String, SocketAddr)> = Vec::new();
    for (name, host, port) in parse_listener_list("listeners", s.listeners)? {
        let bind = bind_address("listeners", s.listeners, &host, port)?;
        if out.iter().any(|(_, _, b)| {
            b.port() == bind.port() && (b.ip() == bind.ip() || b.ip().is_unspecified() || bind.ip().is_unspecified())
        }) {
            return Err(invalid(
                "listeners",
                s.listeners,
                format!("two listeners bind {bind}; give each its own port"),
            ));
        }
        out.push((name, host, bind));
    }
    Ok(out)
}

fn advertised_listeners(
    s: &ListenerSettings<'_>,
    bound: &[(String, String, SocketAddr)],
) -> Result<Vec<(String, String, i32)>, ConfigError> {
    let key = "advertised.listeners";
    let entries = match (s.advertise, s.advertised_listeners.trim().is_empty()) {
        (Some(_), false) => {
            return Err(invalid(
                key,
                s.advertised_listeners,
                "--advertise gives the same thing; use one or the other",
            ))
        }
        (Some(advertise), true) => {
            if bound.len() != 1 {
                return Err(ConfigError::BadAdvertise(format!(
                    "{advertise} (with several listeners, give each its address in advertised.listeners instead)"
                )));
            }
            let (host, port) = super::split_host_port(advertise)?;
            vec![(bound[0].0.clone(), host, port)]
        }
        (None, true) => return Ok(vec![]),
        (None, false) => parse_listener_list(key, s.advertised_listeners)?
            .into_iter()
            .map(|(name, host, port)| (name, host, i32::from(port)))
            .collect(),
    };
    for (name, host, _) in &entries {
        if !bound.iter().any(|(n, _, _)| n == name) {
            let names: Vec<&str> = bound.iter().map(|(n, _, _)| n.as_str()).collect();
            return Err(invalid(
                key,
                s.advertised_listeners,
                format!(
                    "{name} is not one of the listeners ({}); name a listener from `listeners`",
                    names.join(", ")
                ),
            ));
        }
        if host.is_empty() || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_unspecified()) {
            return Err(invalid(
                key,
                s.advertised_listeners,
                format!("{name} advertises {host:?}, which clients cannot dial; give the host name or address they reach this node by"),
            ));
        }
    }
    Ok(entries)
}

/// The host a listener with no advertised address tells clients: the one it binds, which must
/// then be one a client can dial.
fn advertisable_host(name: &str, given: &str, bind: SocketAddr) -> Result<String, ConfigError> {
    if bind.ip().is_unspecified() {
        return Err(invalid(
            "advertised.listeners",
            "",
            format!(
                "listener {name} binds {bind}, an address clients cannot dial; give the address they reach it by, e.g. --set advertised.listeners={name}://my-host:{}",
                bind.port()
            ),
        ));
    }
    Ok(if given.parse::<IpAddr>().is_ok() || given.is_empty() {
        bind.ip().to_string()
    } else {
        given.to_string()
    })
}

/// The endpoint name under which a broker registers its `metrics.listen` HTTP address beside its
/// Kafka listeners, so every broker's console can reach the others'. No Kafka listener may
/// take it, so no client is ever answered with this address.
pub const HTTP_ENDPOINT_NAME: &str = "SLUICE_HTTP";

/// `NAME://host:port,...` with upper-cased unique names; the host may be empty or `[v6]`.
fn parse_listener_list(key: &str, value: &str) -> Result<Vec<(String, String, u16)>, ConfigError> {
    let mut out: Vec<(String, String, u16)> = Vec::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let bad = |reason: &str| {
            invalid(
                key,
                value,
                format!("{entry:?} {reason}; write NAME://host:port, e.g. INTERNAL://0.0.0.0:9092"),
            )
        };
        let (name, address) = entry.split_once("://").ok_or_else(|| bad("has no NAME://"))?;
        let name = name.trim().to_ascii_uppercase();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            return Err(bad("has a listener name other than letters, digits, '_' and '-'"));
        }
        let (host, port) = address.rsplit_once(':').ok_or_else(|| bad("has no port"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| bad("has a port that is not a number from 0 to 65535"))?;
        if name == HTTP_ENDPOINT_NAME {
            return Err(bad(
                "uses the name Sluice registers its metrics and console address under; choose another name",
            ));
        }
        if out.iter().any(|(n, _, _)| *n == name) {
            return Err(invalid(
                key,
                value,
                format!("listener name {name} appears twice; each listener needs its own name"),
            ));
        }
        out.push((name, host.trim_matches(['[', ']']).to_string(), port));
    }
    if out.is_empty() {
        return Err(invalid(key, value, "names no listener; write NAME://host:port,..."));
    }
    Ok(out)
}

/// Where a listener binds: an empty host is every interface, a name is resolved once.
fn bind_address(key: &str, value: &str, host: &str, port: u16) -> Result<SocketAddr, ConfigError> {
    if host.is_empty() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port));
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    (host, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| {
            invalid(
                key,
                value,
                format!("host {host:?} does not resolve here; bind an address (or 0.0.0.0) instead"),
            )
        })
}

/// The protocol `listener.security.protocol.map` gives the listener `name`, if it names it.
pub fn protocol_in_map(map: &str, name: &str) -> Result<Option<SecurityProtocol>, ConfigError> {
    let key = "listener.security.protocol.map";
    for entry in map.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (n, protocol) = entry
            .split_once(':')
            .ok_or_else(|| invalid(key, map, format!("{entry:?} is not NAME:PROTOCOL")))?;
        if n.trim().eq_ignore_ascii_case(name) {
            return SecurityProtocol::parse(protocol).map(Some).ok_or_else(|| {
                invalid(
                    key,
                    map,
                    format!("{protocol:?} is not a security protocol; use PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"),
                )
            });
        }
    }
    Ok(None)
}

/// Each bound listener's security protocol, in `bound`'s order.
fn security_protocols(map: &str, bound: &[(String, String, SocketAddr)]) -> Result<Vec<SecurityProtocol>, ConfigError> {
    let key = "listener.security.protocol.map";
    let mut protocols = Vec::new();
    for entry in map.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, protocol) = entry
            .split_once(':')
            .ok_or_else(|| invalid(key, map, format!("{entry:?} is not NAME:PROTOCOL")))?;
        let protocol = SecurityProtocol::parse(protocol).ok_or_else(|| {
            invalid(
                key,
                map,
                format!("{protocol:?} is not a security protocol; use PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"),
            )
        })?;
        protocols.push((name.trim().to_ascii_uppercase(), protocol));
    }
    bound
        .iter()
        .map(|(name, _, _)| match protocols.iter().find(|(n, _)| n == name) {
            Some((_, protocol)) => Ok(*protocol),
            None => Err(invalid(
                key,
                map,
                format!("listener {name} has no security protocol; add {name}:PLAINTEXT (or SSL, SASL_PLAINTEXT, SASL_SSL) to listener.security.protocol.map"),
            )),
        })
        .collect()
}

fn inter_broker_listener(given: &str, all: &[Listener]) -> Result<String, ConfigError> {
    let names = || all.iter().map(|l| l.name.as_str()).collect::<Vec<_>>().join(", ");
    let given = given.trim().to_ascii_uppercase();
    if !given.is_empty() {
        if all.iter().any(|l| l.name == given) {
            return Ok(given);
        }
        return Err(invalid(
            "inter.broker.listener.name",
            &given,
            format!("it is not one of the listeners ({})", names()),
        ));
    }
    match all {
        [only] => Ok(only.name.clone()),
        _ if all.iter().any(|l| l.name == DEFAULT_LISTENER_NAME) => Ok(DEFAULT_LISTENER_NAME.to_string()),
        _ => Err(invalid(
            "inter.broker.listener.name",
            "",
            format!(
                "with several listeners, say which one brokers replicate through: one of {}",
                names()
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings<'a>(listeners: &'a str, advertised: &'a str, inter: &'a str) -> ListenerSettings<'a> {
        ListenerSettings {
            listen: None,
            advertise: None,
            listeners,
            advertised_listeners: advertised,
            security_protocol_map: "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL",
            inter_broker_listener_name: inter,
        }
    }

    fn error(s: &ListenerSettings<'_>) -> String {
        Listeners::resolve(s).unwrap_err().to_string()
    }

    #[test]
    fn no_listener_settings_give_one_plaintext_listener_on_loopback() {
        let l = Listeners::resolve(&settings("", "", "")).unwrap();
        assert_eq!(l.inter_broker, "PLAINTEXT");
        assert_eq!(l.all.len(), 1);
        assert_eq!(l.all[0].bind, DEFAULT_BIND);
        assert_eq!(
            (l.all[0].advertised_host.as_str(), l.all[0].advertised_port),
            ("127.0.0.1", 9092)
        );
        assert_eq!(l.describe_bound(), "PLAINTEXT://127.0.0.1:9092");
    }

    #[test]
    fn listen_and_advertise_are_shorthands_for_one_plaintext_listener() {
        let mut s = settings("", "", "");
        s.listen = Some("0.0.0.0:19092".parse().unwrap());
        s.advertise = Some("broker1.example:29092");
        let l = Listeners::resolve(&s).unwrap();
        assert_eq!(l.describe_advertised(), "PLAINTEXT://broker1.example:29092");
        assert_eq!(l.all[0].bind.to_string(), "0.0.0.0:19092");
    }

    #[test]
    fn named_listeners_each_advertise_their_own_address() {
        let l = Listeners::resolve(&settings(
            "internal://0.0.0.0:9092,EXTERNAL://:19092",
            "INTERNAL://sluice1:9092,EXTERNAL://localhost:19092",
            "internal",
        ))
        .unwrap();
        assert_eq!(l.inter_broker, "INTERNAL");
        assert_eq!(l.describe_bound(), "INTERNAL://0.0.0.0:9092,EXTERNAL://0.0.0.0:19092");
        assert_eq!(
            l.describe_advertised(),
            "INTERNAL://sluice1:9092,EXTERNAL://localhost:19092"
        );
    }

    #[test]
    fn each_listener_takes_its_protocol_from_the_map() {
        let l = Listeners::resolve(&settings("SSL://127.0.0.1:9093,INTERNAL://127.0.0.1:9092", "", "SSL")).unwrap();
        assert_eq!(l.all[0].protocol, SecurityProtocol::Ssl);
        assert_eq!(l.all[1].protocol, SecurityProtocol::Plaintext);
        assert_eq!(l.inter_broker_listener().name, "SSL");
    }

    #[test]
    fn a_listener_without_an_advertised_address_advertises_what_it_binds() {
        let l = Listeners::resolve(&settings(
            "INTERNAL://127.0.0.2:9092,EXTERNAL://[::1]:19092",
            "",
            "INTERNAL",
        ))
        .unwrap();
        assert_eq!(
            l.describe_advertised(),
            "INTERNAL://127.0.0.2:9092,EXTERNAL://[::1]:19092"
        );
    }

    #[test]
    fn wrong_listener_settings_are_refused_with_what_to_change() {
        assert!(error(&settings("INTERNAL://0.0.0.0:9092", "", "")).contains("clients cannot dial"));
        assert!(error(&settings("INTERNAL://1.2.3.4", "", "")).contains("has no port"));
        assert!(error(&settings("1.2.3.4:9092", "", "")).contains("NAME://"));
        assert!(error(&settings("A://127.0.0.1:1,A://127.0.0.1:2", "", "")).contains("appears twice"));
        assert!(error(&settings(
            "INTERNAL://0.0.0.0:9092,EXTERNAL://127.0.0.1:9092",
            "",
            "INTERNAL"
        ))
        .contains("two listeners bind"));
        assert!(error(&settings("INTERNAL://127.0.0.1:1", "OTHER://h:1", "")).contains("not one of the listeners"));
        assert!(error(&settings("INTERNAL://127.0.0.1:1", "INTERNAL://0.0.0.0:1", "")).contains("cannot dial"));
        assert!(
            error(&settings("INTERNAL://127.0.0.1:1,EXTERNAL://127.0.0.1:2", "", ""))
                .contains("inter.broker.listener.name")
        );
        assert!(error(&settings("INTERNAL://127.0.0.1:1", "", "EXTERNAL")).contains("not one of the listeners"));
        assert!(error(&settings("OTHER://127.0.0.1:1", "", "")).contains("add OTHER:PLAINTEXT"));
        let mut bad_protocol = settings("INTERNAL://127.0.0.1:1", "", "");
        bad_protocol.security_protocol_map = "INTERNAL:TLS";
        assert!(error(&bad_protocol).contains("not a security protocol"));
        let mut both = settings("INTERNAL://127.0.0.1:1", "", "");
        both.listen = Some(DEFAULT_BIND);
        assert!(error(&both).contains("--listen"));
        let mut several = settings("INTERNAL://127.0.0.1:1,EXTERNAL://127.0.0.1:2", "", "INTERNAL");
        several.advertise = Some("h:1");
        assert!(error(&several).contains("advertised.listeners"));
    }
}
