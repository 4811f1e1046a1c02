//! The client side of SCRAM-SHA-512 (RFC 5802 with SHA-512, as Kafka names it), for
//! [`crate::admin`]'s login: the two messages the client sends and its check of the server's
//! last one, which proves the broker holds the user's credential (so a server that merely
//! accepts anything is caught). The password itself never crosses the wire.

use anyhow::{bail, ensure, Context, Result};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::{Digest, Sha512};

type HmacSha512 = Hmac<Sha512>;

/// Kafka refuses fewer iterations than this; a server offering fewer is not trusted.
const MIN_ITERATIONS: u32 = 4096;
/// Kafka's maximum; more would let a server make the client spin.
const MAX_ITERATIONS: u32 = 16384;

pub const MECHANISM: &str = "SCRAM-SHA-512";

/// One login, from client-first to the server's signature.
pub struct ScramClient {
    password: String,
    client_nonce: String,
    client_first_bare: String,
    /// The signature the server must send, known once the client-final message is made.
    expected_server_signature: Option<Vec<u8>>,
}

/// `=` and `,` in a user name, escaped as RFC 5802 says.
fn escape(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

fn hmac(key: &[u8], message: &[u8]) -> Vec<u8> {
    let mut mac = HmacSha512::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(message);
    mac.finalize().into_bytes().to_vec()
}

/// `key=value` attributes of a server message.
fn attribute(message: &str, key: char) -> Option<&str> {
    message
        .split(',')
        .find_map(|part| part.strip_prefix(key).and_then(|rest| rest.strip_prefix('=')))
}

impl ScramClient {
    pub fn new(username: &str, password: &str) -> ScramClient {
        let mut nonce = [0u8; 24];
        rand::rngs::OsRng.fill_bytes(&mut nonce);
        let client_nonce = BASE64.encode(nonce);
        ScramClient {
            password: password.to_string(),
            client_first_bare: format!("n={},r={client_nonce}", escape(username)),
            client_nonce,
            expected_server_signature: None,
        }
    }

    /// The client-first message: no channel binding, the user name and a fresh nonce.
    pub fn client_first(&self) -> Vec<u8> {
        format!("n,,{}", self.client_first_bare).into_bytes()
    }

    /// The client-final message, with the proof that the client knows the password, for the
    /// server-first message (`r=<nonce>,s=<salt>,i=<iterations>`).
    pub fn client_final(&mut self, server_first: &[u8]) -> Result<Vec<u8>> {
        let server_first = std::str::from_utf8(server_first).context("the server-first message is not UTF-8")?;
        let nonce = attribute(server_first, 'r').context("the server-first message has no nonce")?;
        ensure!(
            nonce.starts_with(&self.client_nonce) && nonce.len() > self.client_nonce.len(),
            "the server's nonce does not extend ours"
        );
        let salt = BASE64
            .decode(attribute(server_first, 's').context("the server-first message has no salt")?)
            .context("the salt is not base64")?;
        let iterations: u32 = attribute(server_first, 'i')
            .and_then(|i| i.parse().ok())
            .context("the server-first message has no iteration count")?;
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
            bail!("the server asks for {iterations} iterations, outside {MIN_ITERATIONS}..={MAX_ITERATIONS}");
        }
        let mut salted_password = [0u8; 64];
        pbkdf2::pbkdf2_hmac::<Sha512>(self.password.as_bytes(), &salt, iterations, &mut salted_password);
        let client_key = hmac(&salted_password, b"Client Key");
        let stored_key = Sha512::digest(&client_key);
        // c=biws: base64 of "n,,", the GS2 header (no channel binding).
        let client_final_bare = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{server_first},{client_final_bare}", self.client_first_bare);
        let client_signature = hmac(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&client_signature).map(|(k, s)| k ^ s).collect();
        let server_key = hmac(&salted_password, b"Server Key");
        self.expected_server_signature = Some(hmac(&server_key, auth_message.as_bytes()));
        Ok(format!("{client_final_bare},p={}", BASE64.encode(proof)).into_bytes())
    }

    /// Checks the server-final message: `v=<signature>` only a holder of the credential can
    /// make, or `e=<error>`.
    pub fn verify_server_final(&self, server_final: &[u8]) -> Result<()> {
        let server_final = std::str::from_utf8(server_final).context("the server-final message is not UTF-8")?;
        if let Some(error) = attribute(server_final, 'e') {
            bail!("the server refused the login: {error}");
        }
        let signature = BASE64
            .decode(attribute(server_final, 'v').context("the server-final message has no signature")?)
            .context("the server signature is not base64")?;
        let expected = self
            .expected_server_signature
            .as_ref()
            .context("the server-final message came before the client-final one")?;
        ensure!(
            &signature == expected,
            "the server's signature is wrong: it does not hold this user's credential"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The server's side of RFC 5802, written out independently of the client's code.
    fn server_answers(client_first: &str, password: &str, salt: &[u8], iterations: u32) -> (String, Vec<u8>) {
        let bare = client_first.strip_prefix("n,,").unwrap();
        let nonce = format!("{}server-part", attribute(bare, 'r').unwrap());
        let server_first = format!("r={nonce},s={},i={iterations}", BASE64.encode(salt));
        let mut salted = [0u8; 64];
        pbkdf2::pbkdf2_hmac::<Sha512>(password.as_bytes(), salt, iterations, &mut salted);
        (server_first, salted.to_vec())
    }

    #[test]
    fn a_login_proves_the_password_and_checks_the_server_signature() {
        let mut client = ScramClient::new("orders,sink=1", "pw");
        let first = String::from_utf8(client.client_first()).unwrap();
        assert!(first.starts_with("n,,n=orders=2Csink=3D1,r="), "{first}");
        let (server_first, salted) = server_answers(&first, "pw", b"salt", 4096);
        let final_message = String::from_utf8(client.client_final(server_first.as_bytes()).unwrap()).unwrap();
        let (without_proof, proof) = final_message.rsplit_once(",p=").unwrap();
        let auth_message = format!("{},{server_first},{without_proof}", first.strip_prefix("n,,").unwrap());
        let client_key = hmac(&salted, b"Client Key");
        let signature = hmac(&Sha512::digest(&client_key), auth_message.as_bytes());
        let recovered: Vec<u8> = BASE64
            .decode(proof)
            .unwrap()
            .iter()
            .zip(&signature)
            .map(|(p, s)| p ^ s)
            .collect();
        assert_eq!(recovered, client_key, "the proof is ClientKey XOR ClientSignature");
        let server_signature = hmac(&hmac(&salted, b"Server Key"), auth_message.as_bytes());
        client
            .verify_server_final(format!("v={}", BASE64.encode(&server_signature)).as_bytes())
            .unwrap();
        assert!(client.verify_server_final(b"v=AAAA").is_err());
        assert!(client.verify_server_final(b"e=invalid-proof").is_err());
    }

    #[test]
    fn a_server_nonce_that_does_not_extend_ours_or_too_few_iterations_are_refused() {
        let mut client = ScramClient::new("u", "pw");
        assert!(client.client_final(b"r=other,s=c2FsdA==,i=4096").is_err());
        let first = String::from_utf8(client.client_first()).unwrap();
        let (server_first, _) = server_answers(&first, "pw", b"salt", 1000);
        assert!(client.client_final(server_first.as_bytes()).is_err());
    }
}
