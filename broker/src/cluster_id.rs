//! The cluster id (Kafka's: 128 bits in URL-safe base64, 22 characters): random for a new
//! single node, or derived from `--voters` so that every node of a cluster agrees on it
//! without a formatting step. A leaf module: it imports nothing from the crate.

use std::collections::BTreeMap;

use uuid::Uuid;

/// A Kafka-style cluster id: 128 random bits in URL-safe base64 (22 chars).
pub fn new_cluster_id() -> String {
    cluster_id_from(Uuid::new_v4().as_u128())
}

/// A cluster id derived from the voter set, so that nodes started with the same `--voters`
/// agree on it without a separate formatting step.
pub fn cluster_id_for_voters(voters: &BTreeMap<i32, String>) -> String {
    let text: String = voters.iter().map(|(id, addr)| format!("{id}@{addr},")).collect();
    let value = [0u32, 0x5100_1ce5, 0x0b5e_55ed, 0x7a11_0c8d]
        .iter()
        .fold(0u128, |acc, seed| {
            acc << 32 | u128::from(crc32c::crc32c_append(*seed, text.as_bytes()))
        });
    cluster_id_from(value)
}

fn cluster_id_from(value: u128) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    (0..22)
        .map(|i| ALPHABET[((value >> (6 * i)) & 63) as usize] as char)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn voters_determine_the_cluster_id() {
        let a = BTreeMap::from([(1, "h:1".to_string()), (2, "h:2".to_string())]);
        let b = BTreeMap::from([(1, "h:1".to_string()), (2, "h:3".to_string())]);
        assert_eq!(cluster_id_for_voters(&a), cluster_id_for_voters(&a.clone()));
        assert_ne!(cluster_id_for_voters(&a), cluster_id_for_voters(&b));
    }
}
