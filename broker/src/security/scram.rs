//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka speaks them: the server
//! side of the exchange, the client side a broker uses to log in to another broker, and the
//! derivation of stored credentials from a password.
//!
//! The exchange is ours (no maintained crate speaks both hashes on the server side); its
//! primitives are RustCrypto's HMAC, SHA-2 and PBKDF2, and the proof is compared in constant
//! time. An unknown user gets a made-up credential and fails at the proof, exactly as a wrong
//! password does, so the exchange does not tell which users exist.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use hmac::{Hmac, Mac};
use rand::distributions::Alphanumeric;
use rand::Rng;
use sha2::{Digest, Sha256, Sha512};
use subtle::ConstantTimeEq;

use crate::metadata::records::{ScramCredential, ScramMechanism};

/// A client nonce longer than this is refused (ours are 32 characters).
const MAX_NONCE_LEN: usize = 256;
/// Salt bytes of the credentials Sluice makes itself (`--add-scram`, the brokers' own).
pub const SALT_BYTES: usize = 16;

fn hmac(mechanism: ScramMechanism, key: &[u8], message: &[u8]) -> Vec<u8> {
    match mechanism {
        ScramMechanism::Sha256 => {
            let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
            mac.update(message);
            mac.finalize().into_bytes().to_vec()
        }
        ScramMechanism::Sha512 => {
            let mut mac = Hmac::<Sha512>::new_from_slice(key).expect("HMAC takes keys of any length");
            mac.update(message);
            mac.finalize().into_bytes().to_vec()
        }
    }
}

fn hash(mechanism: ScramMechanism, bytes: &[u8]) -> Vec<u8> {
    match mechanism {
        ScramMechanism::Sha256 => Sha256::digest(bytes).to_vec(),
        ScramMechanism::Sha512 => Sha512::digest(bytes).to_vec(),
    }
}

/// RFC 5802's `Hi`: PBKDF2 with HMAC of the mechanism's hash. Costs `iterations` HMACs: run it
/// off the async workers.
pub fn salted_password(mechanism: ScramMechanism, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
    match mechanism {
        ScramMechanism::Sha256 => {
            let mut out = [0u8; 32];
            pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out);
            out.to_vec()
        }
        ScramMechanism::Sha512 => {
            let mut out = [0u8; 64];
            pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out);
            out.to_vec()
        }
    }
}

fn client_key(mechanism: ScramMechanism, salted: &[u8]) -> Vec<u8> {
    hmac(mechanism, salted, b"Client Key")
}

/// The credential kept for a salted password: stored key and server key (what Kafka's
/// AlterUserScramCredentials turns the client's salted password into).
pub fn credential_from_salted(
    user: &str,
    mechanism: ScramMechanism,
    salt: Vec<u8>,
    salted: &[u8],
    iterations: u32,
) -> ScramCredential {
    ScramCredential {
        user: user.to_string(),
        mechanism,
        stored_key: hash(mechanism, &client_key(mechanism, salted)),
        server_key: hmac(mechanism, salted, b"Server Key"),
        salt,
        iterations,
    }
}

/// A credential for a password, with a fresh random salt (`--add-scram`).
pub fn credential_from_password(
    user: &str,
    mechanism: ScramMechanism,
    password: &str,
    iterations: u32,
) -> ScramCredential {
    let salt: Vec<u8> = rand::thread_rng().gen::<[u8; SALT_BYTES]>().to_vec();
    let salted = salted_password(mechanism, password.as_bytes(), &salt, iterations);
    credential_from_salted(user, mechanism, salt, &salted, iterations)
}

/// Whether `password` is the one `credential` was made from (SASL/PLAIN against the SCRAM
/// store). Costs a PBKDF2: run it off the async workers.
pub fn password_matches(credential: &ScramCredential, password: &str) -> bool {
    let salted = salted_password(
        credential.mechanism,
        password.as_bytes(),
        &credential.salt,
        credential.iterations,
    );
    let stored = hash(credential.mechanism, &client_key(credential.mechanism, &salted));
    bool::from(stored.ct_eq(&credential.stored_key))
}

/// RFC 5802's saslname: `=2C` is `,` and `=3D` is `=`; any other `=` is malformed.
fn decode_saslname(name: &str) -> Option<String> {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i..i + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return None,
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Some(out)
}

fn encode_saslname(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

fn random_nonce() -> String {
    rand::thread_rng()
        .sample_iter(&Alphanumeric)
        .take(32)
        .map(char::from)
        .collect()
}

/// The client's first message, parsed: `gs2-header` then `n=user,r=nonce[,ext=value...]`.
#[derive(Debug)]
struct ClientFirst {
    gs2_header: String,
    bare: String,
    user: String,
    nonce: String,
    token_auth: bool,
}

fn parse_client_first(message: &str) -> Result<ClientFirst, &'static str> {
    // gs2-header: channel-binding flag, optional authzid, then the bare message.
    let (flag, rest) = message.split_once(',').ok_or("no GS2 header")?;
    if flag != "n" && flag != "y" {
        return Err("a channel-binding flag, and channel binding is not supported");
    }
    let (authzid, bare) = rest.split_once(',').ok_or("no GS2 header")?;
    let gs2_header = format!("{flag},{authzid},");
    let mut fields = bare.split(',');
    let user = fields
        .next()
        .and_then(|f| f.strip_prefix("n="))
        .and_then(decode_saslname)
        .ok_or("no user name")?;
    let nonce = fields.next().and_then(|f| f.strip_prefix("r=")).ok_or("no nonce")?;
    if nonce.is_empty()
        || nonce.len() > MAX_NONCE_LEN
        || !nonce.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b',')
    {
        return Err("a malformed nonce");
    }
    let authzid = authzid.strip_prefix("a=").map(decode_saslname);
    if let Some(authzid) = authzid {
        if authzid.as_deref() != Some(user.as_str()) {
            return Err("an authorization id other than the user name");
        }
    }
    let token_auth = fields.any(|f| f == "tokenauth=true");
    Ok(ClientFirst {
        gs2_header,
        bare: bare.to_string(),
        user,
        nonce: nonce.to_string(),
        token_auth,
    })
}

/// Where a server-side exchange stands. Lives only for the round trips of one login.
#[allow(clippy::large_enum_variant)]
enum ServerState {
    ExpectFirst,
    ExpectFinal {
        first: ClientFirst,
        server_first: String,
        nonce: String,
        credential: ScramCredential,
        /// The credential is made up (unknown user): the proof can only fail.
        known: bool,
    },
    Done,
}

/// What a SCRAM step produced.
pub enum ScramStep {
    /// Send this challenge and wait for the next message.
    Continue(Vec<u8>),
    /// Authenticated as `user`; send this last message.
    Complete { user: String, response: Vec<u8> },
    /// Refused: the reason, for the broker's log only (the client gets Kafka's fixed message).
    Failed(String),
}

/// The server side of one SCRAM exchange.
pub struct ScramServer {
    mechanism: ScramMechanism,
    state: ServerState,
    /// Keys the made-up credentials of unknown users, so the same name always gets the same salt.
    decoy_key: [u8; 32],
}

impl ScramServer {
    pub fn new(mechanism: ScramMechanism, decoy_key: [u8; 32]) -> ScramServer {
        ScramServer {
            mechanism,
            state: ServerState::ExpectFirst,
            decoy_key,
        }
    }

    /// Takes the client's next message; `lookup` finds a user's stored credential.
    pub fn step(&mut self, message: &[u8], lookup: impl Fn(&str) -> Option<ScramCredential>) -> ScramStep {
        let Ok(message) = std::str::from_utf8(message) else {
            self.state = ServerState::Done;
            return ScramStep::Failed("the SCRAM message is not UTF-8".into());
        };
        match std::mem::replace(&mut self.state, ServerState::Done) {
            ServerState::ExpectFirst => self.first(message, lookup),
            ServerState::ExpectFinal {
                first,
                server_first,
                nonce,
                credential,
                known,
            } => self.last(message, first, server_first, nonce, credential, known),
            ServerState::Done => ScramStep::Failed("a SCRAM message after the exchange ended".into()),
        }
    }

    fn first(&mut self, message: &str, lookup: impl Fn(&str) -> Option<ScramCredential>) -> ScramStep {
        let first = match parse_client_first(message) {
            Ok(first) => first,
            Err(why) => {
                return ScramStep::Failed(format!("the client's first SCRAM message was refused: it has {why}"))
            }
        };
        if first.token_auth {
            return ScramStep::Failed("delegation tokens (tokenauth=true) are not supported".into());
        }
        let (credential, known) = match lookup(&first.user) {
            Some(c) => (c, true),
            None => (self.decoy(&first.user), false),
        };
        let nonce = format!("{}{}", first.nonce, random_nonce());
        let server_first = format!(
            "r={nonce},s={},i={}",
            BASE64.encode(&credential.salt),
            credential.iterations
        );
        let response = server_first.clone().into_bytes();
        self.state = ServerState::ExpectFinal {
            first,
            server_first,
            nonce,
            credential,
            known,
        };
        ScramStep::Continue(response)
    }

    fn last(
        &mut self,
        message: &str,
        first: ClientFirst,
        server_first: String,
        nonce: String,
        credential: ScramCredential,
        known: bool,
    ) -> ScramStep {
        let Some((without_proof, proof)) = message.rsplit_once(",p=") else {
            return ScramStep::Failed("the client's final SCRAM message has no proof".into());
        };
        let mut fields = without_proof.split(',');
        let binding = fields.next().and_then(|f| f.strip_prefix("c="));
        if binding != Some(BASE64.encode(first.gs2_header.as_bytes()).as_str()) {
            return ScramStep::Failed("the client's final SCRAM message has the wrong channel binding".into());
        }
        // Kafka checks only that the nonce ends with the one it sent (`endsWith`), and
        // librdkafka before 2.1 sends its own nonce in front of it again, so check the same.
        let echoed = fields.next().and_then(|f| f.strip_prefix("r="));
        if !echoed.is_some_and(|echoed| echoed.ends_with(nonce.as_str())) {
            return ScramStep::Failed("the client's final SCRAM message has the wrong nonce".into());
        }
        let Ok(proof) = BASE64.decode(proof) else {
            return ScramStep::Failed("the client's SCRAM proof is not base64".into());
        };
        let auth_message = format!("{},{server_first},{without_proof}", first.bare);
        let signature = hmac(self.mechanism, &credential.stored_key, auth_message.as_bytes());
        if proof.len() != signature.len() {
            return ScramStep::Failed(format!("invalid credentials for user {:?}", first.user));
        }
        let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(p, s)| p ^ s).collect();
        let matches = bool::from(hash(self.mechanism, &client_key).ct_eq(&credential.stored_key));
        if !(matches && known) {
            let why = if known { "invalid credentials" } else { "unknown user" };
            return ScramStep::Failed(format!("{why} for user {:?}", first.user));
        }
        let server_signature = hmac(self.mechanism, &credential.server_key, auth_message.as_bytes());
        ScramStep::Complete {
            user: first.user,
            response: format!("v={}", BASE64.encode(server_signature)).into_bytes(),
        }
    }

    /// A credential for a user that does not exist, stable per name, matching no password.
    fn decoy(&self, user: &str) -> ScramCredential {
        let salt = hmac(ScramMechanism::Sha256, &self.decoy_key, user.as_bytes())[..SALT_BYTES].to_vec();
        let key = hmac(ScramMechanism::Sha256, &self.decoy_key, b"decoy key");
        let width = match self.mechanism {
            ScramMechanism::Sha256 => 32,
            ScramMechanism::Sha512 => 64,
        };
        ScramCredential {
            user: user.to_string(),
            mechanism: self.mechanism,
            salt,
            stored_key: key.iter().cycle().take(width).copied().collect(),
            server_key: key.iter().cycle().take(width).copied().collect(),
            iterations: crate::config::security::DEFAULT_SCRAM_ITERATIONS,
        }
    }
}

/// The client side of one SCRAM exchange (a broker logging in to another broker).
pub struct ScramClient {
    mechanism: ScramMechanism,
    user: String,
    password: String,
    nonce: String,
    client_first_bare: String,
    server_signature: Option<Vec<u8>>,
}

impl ScramClient {
    pub fn new(mechanism: ScramMechanism, user: &str, password: &str) -> ScramClient {
        let nonce = random_nonce();
        ScramClient {
            mechanism,
            client_first_bare: format!("n={},r={nonce}", encode_saslname(user)),
            user: user.to_string(),
            password: password.to_string(),
            nonce,
            server_signature: None,
        }
    }

    pub fn first_message(&self) -> Vec<u8> {
        format!("n,,{}", self.client_first_bare).into_bytes()
    }

    /// The final message answering the server's challenge.
    pub fn final_message(&mut self, server_first: &[u8]) -> Result<Vec<u8>, String> {
        let server_first =
            std::str::from_utf8(server_first).map_err(|_| "the server's SCRAM challenge is not UTF-8")?;
        let mut nonce = None;
        let mut salt = None;
        let mut iterations = None;
        for field in server_first.split(',') {
            match field.split_once('=') {
                Some(("r", v)) => nonce = Some(v),
                Some(("s", v)) => salt = BASE64.decode(v).ok(),
                Some(("i", v)) => iterations = v.parse::<u32>().ok(),
                _ => {}
            }
        }
        let (Some(nonce), Some(salt), Some(iterations)) = (nonce, salt, iterations) else {
            return Err(format!("the server's SCRAM challenge is malformed: {server_first:?}"));
        };
        if !nonce.starts_with(&self.nonce) || iterations > crate::controller::scram::MAX_ITERATIONS {
            return Err("the server's SCRAM challenge does not continue this exchange".into());
        }
        let salted = salted_password(self.mechanism, self.password.as_bytes(), &salt, iterations);
        let without_proof = format!("c={},r={nonce}", BASE64.encode(b"n,,"));
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let client_key = client_key(self.mechanism, &salted);
        let stored_key = hash(self.mechanism, &client_key);
        let signature = hmac(self.mechanism, &stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&signature).map(|(k, s)| k ^ s).collect();
        let server_key = hmac(self.mechanism, &salted, b"Server Key");
        self.server_signature = Some(hmac(self.mechanism, &server_key, auth_message.as_bytes()));
        Ok(format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes())
    }

    /// Checks the server's last message: that it knew our credential too.
    pub fn verify_server(&self, server_final: &[u8]) -> Result<(), String> {
        let given = std::str::from_utf8(server_final)
            .ok()
            .and_then(|s| s.strip_prefix("v="))
            .and_then(|v| BASE64.decode(v).ok());
        match (&self.server_signature, given) {
            (Some(expected), Some(given)) if bool::from(expected.ct_eq(&given)) => Ok(()),
            _ => Err(format!("broker could not prove it knows {}'s credential", self.user)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exchange(
        mechanism: ScramMechanism,
        stored: &ScramCredential,
        user: &str,
        password: &str,
    ) -> Result<String, String> {
        let mut server = ScramServer::new(mechanism, [7; 32]);
        let mut client = ScramClient::new(mechanism, user, password);
        let lookup = |name: &str| (name == stored.user).then(|| stored.clone());
        let ScramStep::Continue(challenge) = server.step(&client.first_message(), lookup) else {
            return Err("no challenge".into());
        };
        let last = client.final_message(&challenge)?;
        match server.step(&last, lookup) {
            ScramStep::Complete { user, response } => {
                client.verify_server(&response)?;
                Ok(user)
            }
            ScramStep::Failed(why) => Err(why),
            ScramStep::Continue(_) => Err("another challenge".into()),
        }
    }

    #[test]
    fn the_right_password_authenticates_with_both_hashes() {
        for mechanism in [ScramMechanism::Sha256, ScramMechanism::Sha512] {
            let stored = credential_from_password("alice", mechanism, "pa,ss=word", 4096);
            assert_eq!(exchange(mechanism, &stored, "alice", "pa,ss=word").unwrap(), "alice");
        }
    }

    #[test]
    fn a_wrong_password_and_an_unknown_user_fail_at_the_same_step() {
        let stored = credential_from_password("alice", ScramMechanism::Sha512, "secret", 4096);
        let wrong = exchange(ScramMechanism::Sha512, &stored, "alice", "guess").unwrap_err();
        assert!(wrong.contains("invalid credentials"), "{wrong}");
        let unknown = exchange(ScramMechanism::Sha512, &stored, "mallory", "secret").unwrap_err();
        assert!(unknown.contains("unknown user"), "{unknown}");
    }

    #[test]
    fn known_test_vector_of_rfc7677() {
        // RFC 7677 section 3: user "user", password "pencil".
        let salt = BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let salted = salted_password(ScramMechanism::Sha256, b"pencil", &salt, 4096);
        let credential = credential_from_salted("user", ScramMechanism::Sha256, salt, &salted, 4096);
        let mut server = ScramServer::new(ScramMechanism::Sha256, [0; 32]);
        let lookup = |_: &str| Some(credential.clone());
        let ScramStep::Continue(challenge) = server.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO", lookup) else {
            panic!()
        };
        let challenge = String::from_utf8(challenge).unwrap();
        let server_nonce = challenge
            .strip_prefix("r=")
            .unwrap()
            .split(',')
            .next()
            .unwrap()
            .to_string();
        assert!(server_nonce.starts_with("rOprNGfwEbeRWgbNEkqO"));
        // The RFC's proof is for its own server nonce, so recompute the client side for ours.
        let mut client = ScramClient {
            mechanism: ScramMechanism::Sha256,
            user: "user".into(),
            password: "pencil".into(),
            nonce: "rOprNGfwEbeRWgbNEkqO".into(),
            client_first_bare: "n=user,r=rOprNGfwEbeRWgbNEkqO".into(),
            server_signature: None,
        };
        let last = client.final_message(challenge.as_bytes()).unwrap();
        assert!(matches!(server.step(&last, lookup), ScramStep::Complete { .. }));
        assert!(password_matches(&credential, "pencil"));
        assert!(!password_matches(&credential, "pencil2"));
    }

    #[test]
    fn malformed_first_messages_are_refused() {
        for bad in [
            &b"n,,r=abc"[..],
            b"p=tls-unique,,n=user,r=abc",
            b"n,,n=us=er,r=abc",
            b"n,a=other,n=user,r=abc",
            b"n,,n=user,r=",
            b"garbage",
            b"\xff\xfe",
        ] {
            let mut server = ScramServer::new(ScramMechanism::Sha256, [0; 32]);
            assert!(matches!(server.step(bad, |_| None), ScramStep::Failed(_)), "{bad:?}");
        }
    }

    #[test]
    fn saslnames_escape_commas_and_equals() {
        assert_eq!(decode_saslname("a=2Cb=3Dc").as_deref(), Some("a,b=c"));
        assert_eq!(encode_saslname("a,b=c"), "a=2Cb=3Dc");
        assert_eq!(decode_saslname("a=x"), None);
    }
}
