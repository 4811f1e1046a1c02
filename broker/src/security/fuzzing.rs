//! The body of the `sasl_messages` fuzz target (`fuzz/fuzz_targets/sasl_messages.rs`), shared
//! with the corpus replay test below, so CI on stable runs what the fuzzer runs on nightly.
//!
//! Every SASL parser a stranger reaches before authenticating gets the input: the SCRAM server
//! (first and final messages, for a known and an unknown user, both hashes), the SCRAM client
//! (a hostile broker's challenge, for the inter-broker login), PLAIN and the OAUTHBEARER
//! initial response. Each must return normally; a completed SCRAM exchange from fuzzed bytes
//! would be a forged login and fails the target.

use super::authenticator::parse_plain;
use super::oauthbearer;
use super::scram::{credential_from_password, ScramClient, ScramServer, ScramStep};
use crate::metadata::records::ScramMechanism;

/// Input: a selector byte, then messages separated by 0xFF bytes.
pub fn sasl_messages(data: &[u8]) {
    let Some((selector, rest)) = data.split_first() else {
        return;
    };
    let messages: Vec<&[u8]> = rest.split(|b| *b == 0xFF).take(4).collect();
    let mechanism = if selector & 1 == 0 {
        ScramMechanism::Sha256
    } else {
        ScramMechanism::Sha512
    };
    match selector % 6 {
        0 | 1 => {
            // Iterations kept at the minimum: the fuzzer does not need slow PBKDF2 runs.
            let stored = credential_from_password("alice", mechanism, "secret", 4096);
            let known = selector % 12 < 6;
            let mut server = ScramServer::new(mechanism, [9; 32]);
            for message in &messages {
                let step = server.step(message, |user| (known && user == "alice").then(|| stored.clone()));
                match step {
                    ScramStep::Continue(_) => {}
                    ScramStep::Failed(_) => break,
                    ScramStep::Complete { user, .. } => panic!("fuzzed bytes logged in as {user:?}"),
                }
            }
        }
        2 | 3 => {
            let mut client = ScramClient::new(mechanism, "alice", "secret");
            let _ = client.first_message();
            if let Ok(_final) = client.final_message(messages[0]) {
                let _ = client.verify_server(messages.get(1).copied().unwrap_or_default());
            }
        }
        4 => {
            let _ = parse_plain(rest);
        }
        _ => {
            if let Ok(token) = oauthbearer::parse_initial_response(rest) {
                let _ = jsonwebtoken::decode_header(token);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Replays every committed input of the `sasl_messages` corpus and its regressions.
    #[test]
    fn the_sasl_corpus_replays_without_a_panic() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
        let mut replayed = 0;
        for dir in [root.join("sasl_messages"), root.join("regressions/sasl_messages")] {
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for entry in entries.flatten() {
                let bytes = std::fs::read(entry.path()).unwrap();
                super::sasl_messages(&bytes);
                replayed += 1;
            }
        }
        assert!(
            replayed >= 8,
            "only {replayed} corpus inputs found under {}",
            root.display()
        );
    }
}
