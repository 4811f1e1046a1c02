//! SASL/OAUTHBEARER (RFC 7628, Kafka's KIP-255 and KIP-768): the client sends a JWT, which is
//! valid when a key of the JWKS signed it with an asymmetric algorithm, it has not expired (a
//! `sasl.oauthbearer.clock.skew.seconds` margin allowed), and its audience and issuer are the
//! expected ones when those are set. The principal is the `sasl.oauthbearer.sub.claim.name`
//! claim; the session ends when the token expires (the client re-authenticates with a new one,
//! KIP-368).
//!
//! The JWKS comes from a file or an http(s) URL (`sasl.oauthbearer.jwks.endpoint.url`), read
//! at start, every `sasl.oauthbearer.jwks.endpoint.refresh.ms`, and again (at most every 10 s)
//! when a token names a key id it does not hold, so rotated keys are picked up.

use std::sync::Arc;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use parking_lot::{Mutex, RwLock};

use crate::config::security::OAuthBearerSettings;

/// A JWKS document larger than this is refused.
const MAX_JWKS_BYTES: u64 = 1 << 20;
/// A token (client initial response) larger than this is refused.
pub const MAX_TOKEN_BYTES: usize = 64 * 1024;
/// Unknown key ids trigger a JWKS refresh at most this often.
const MIN_REFRESH_INTERVAL: Duration = Duration::from_secs(10);

/// Checks tokens against the JWKS.
pub struct JwtValidator {
    settings: OAuthBearerSettings,
    keys: RwLock<Arc<JwkSet>>,
    last_refresh: Mutex<Option<Instant>>,
}

/// A token that passed: who it names and when it expires (ms since the epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidToken {
    pub principal_name: String,
    pub expires_at_ms: u64,
}

impl JwtValidator {
    /// Reads the JWKS. A file must read; a URL that does not answer yet is logged and retried
    /// by [`Self::refresh`] (tokens are refused until it answers).
    pub fn load(settings: &OAuthBearerSettings) -> Result<JwtValidator, String> {
        let validator = JwtValidator {
            settings: settings.clone(),
            keys: RwLock::new(Arc::new(JwkSet { keys: Vec::new() })),
            last_refresh: Mutex::new(None),
        };
        match fetch_jwks(&settings.jwks_endpoint_url) {
            Ok(keys) => *validator.keys.write() = Arc::new(keys),
            Err(e) if is_url(&settings.jwks_endpoint_url) => tracing::warn!(
                url = %settings.jwks_endpoint_url,
                "cannot read the OAUTHBEARER JWKS yet ({e}); tokens are refused until it answers, retried every refresh"
            ),
            Err(e) => return Err(format!("sasl.oauthbearer.jwks.endpoint.url: {e}")),
        }
        Ok(validator)
    }

    pub fn refresh_interval(&self) -> Duration {
        Duration::from_millis(self.settings.jwks_refresh_ms)
    }

    /// Reads the JWKS again (blocking I/O: call from a blocking thread). Keeps the old keys
    /// when it fails.
    pub fn refresh(&self) {
        *self.last_refresh.lock() = Some(Instant::now());
        match fetch_jwks(&self.settings.jwks_endpoint_url) {
            Ok(keys) => *self.keys.write() = Arc::new(keys),
            Err(e) => tracing::warn!(url = %self.settings.jwks_endpoint_url,
                "cannot read the OAUTHBEARER JWKS ({e}); keeping the keys read before"),
        }
    }

    /// Checks a token (blocking: it may refresh the JWKS for an unknown key id).
    pub fn validate(&self, token: &str, now_ms: u64) -> Result<ValidToken, String> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| format!("the token is not a JWT: {e}"))?;
        if !matches!(
            header.alg,
            Algorithm::RS256
                | Algorithm::RS384
                | Algorithm::RS512
                | Algorithm::PS256
                | Algorithm::PS384
                | Algorithm::PS512
                | Algorithm::ES256
                | Algorithm::ES384
                | Algorithm::EdDSA
        ) {
            return Err(format!(
                "the token is signed with {:?}; only asymmetric algorithms are accepted",
                header.alg
            ));
        }
        let keys = self.keys_for(header.kid.as_deref());
        let jwk = match header.kid.as_deref() {
            Some(kid) => keys
                .find(kid)
                .ok_or_else(|| format!("no key with id {kid:?} in the JWKS"))?,
            None if keys.keys.len() == 1 => &keys.keys[0],
            None => return Err("the token names no key id (kid) and the JWKS holds several keys".into()),
        };
        if matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_)) {
            return Err("the JWKS key is a symmetric (oct) key; only public keys are accepted".into());
        }
        let key = DecodingKey::from_jwk(jwk).map_err(|e| format!("the JWKS key cannot be used: {e}"))?;
        let mut validation = Validation::new(header.alg);
        validation.leeway = self.settings.clock_skew_seconds;
        validation.set_required_spec_claims(&["exp"]);
        if !self.settings.expected_audience.is_empty() {
            validation.set_audience(&self.settings.expected_audience);
        } else {
            validation.validate_aud = false;
        }
        if let Some(issuer) = &self.settings.expected_issuer {
            validation.set_issuer(&[issuer]);
        }
        let data = jsonwebtoken::decode::<serde_json::Map<String, serde_json::Value>>(token, &key, &validation)
            .map_err(|e| format!("the token is not valid: {e}"))?;
        let claims = data.claims;
        let expires_at_ms = claims
            .get("exp")
            .and_then(|v| v.as_f64())
            .map(|exp| (exp * 1000.0) as u64)
            .ok_or("the token has no numeric exp claim")?;
        // Leeway is for clocks that disagree, not for expired sessions: one past exp now is over.
        if expires_at_ms + self.settings.clock_skew_seconds * 1000 <= now_ms {
            return Err("the token has expired".into());
        }
        let claim = &self.settings.sub_claim_name;
        let principal_name = claims
            .get(claim)
            .and_then(|v| v.as_str())
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| format!("the token has no {claim:?} claim naming its principal"))?
            .to_string();
        Ok(ValidToken {
            principal_name,
            expires_at_ms,
        })
    }

    /// The keys, read again first when `kid` is not among them (rate-limited).
    fn keys_for(&self, kid: Option<&str>) -> Arc<JwkSet> {
        let keys = self.keys.read().clone();
        let missing = kid.is_some_and(|kid| keys.find(kid).is_none());
        if !missing {
            return keys;
        }
        let due = self
            .last_refresh
            .lock()
            .is_none_or(|at| at.elapsed() >= MIN_REFRESH_INTERVAL);
        if due {
            self.refresh();
        }
        self.keys.read().clone()
    }
}

fn is_url(location: &str) -> bool {
    location.starts_with("http://") || location.starts_with("https://")
}

fn fetch_jwks(location: &str) -> Result<JwkSet, String> {
    let body = if is_url(location) {
        let response = ureq::get(location)
            .config()
            .timeout_global(Some(Duration::from_secs(10)))
            .build()
            .call()
            .map_err(|e| format!("GET {location} failed: {e}"))?;
        response
            .into_body()
            .with_config()
            .limit(MAX_JWKS_BYTES)
            .read_to_vec()
            .map_err(|e| format!("reading {location}: {e}"))?
    } else {
        use std::io::Read;
        let path = location.strip_prefix("file://").unwrap_or(location);
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_JWKS_BYTES).read_to_end(&mut bytes))
            .map_err(|e| format!("cannot read {path}: {e}"))?;
        bytes
    };
    serde_json::from_slice(&body).map_err(|e| format!("{location} is not a JWKS document: {e}"))
}

/// The token in an OAUTHBEARER client initial response: `n,[a=authzid],` then
/// `\x01auth=Bearer <token>\x01` and optional `key=value\x01` extensions, ending with `\x01`.
pub fn parse_initial_response(message: &[u8]) -> Result<&str, &'static str> {
    if message.len() > MAX_TOKEN_BYTES {
        return Err("the token is too large");
    }
    let text = std::str::from_utf8(message).map_err(|_| "the message is not UTF-8")?;
    let (gs2, rest) = text.split_once('\x01').ok_or("no key-value section")?;
    if !gs2.starts_with("n,") {
        return Err("no GS2 header");
    }
    for pair in rest.split('\x01').filter(|p| !p.is_empty()) {
        if let Some(value) = pair.strip_prefix("auth=") {
            let token = value
                .strip_prefix("Bearer ")
                .ok_or("the auth value is not a Bearer token")?;
            return Ok(token.trim());
        }
    }
    Err("no auth=Bearer value")
}

/// What the server answers an invalid token with before failing (RFC 7628 section 3.2.2).
pub fn error_challenge() -> &'static str {
    r#"{"status":"invalid_token"}"#
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_read_from_the_initial_response() {
        let message = b"n,,\x01host=broker\x01auth=Bearer abc.def.ghi\x01\x01";
        assert_eq!(parse_initial_response(message).unwrap(), "abc.def.ghi");
        assert!(parse_initial_response(b"n,,\x01auth=Basic abc\x01\x01").is_err());
        assert!(parse_initial_response(b"garbage").is_err());
        assert!(parse_initial_response(&vec![b'a'; MAX_TOKEN_BYTES + 1]).is_err());
    }
}
