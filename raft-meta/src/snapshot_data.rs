//! The bytes of a raft snapshot's `data`: this crate's own header (the learners' addresses)
//! around the state machine's snapshot. Read by the driver when it installs a snapshot and by
//! the validator before a peer's snapshot reaches raft-rs; a leaf of this crate.

use std::collections::BTreeMap;

const SNAPSHOT_DATA_VERSION: u8 = 1;

/// Snapshot `data` = `version u8, learner count u32, (id u64, addr len u16, addr)*, state machine
/// bytes`. The learner addresses travel with the snapshot because a member that catches up by
/// snapshot never sees the `AddLearnerNode` entries, yet must reach learners if it becomes leader.
pub(crate) fn encode_snapshot_data(learner_addrs: &BTreeMap<u64, String>, sm: &[u8]) -> Vec<u8> {
    let mut buf = Vec::with_capacity(5 + learner_addrs.len() * 32 + sm.len());
    buf.push(SNAPSHOT_DATA_VERSION);
    buf.extend_from_slice(&(learner_addrs.len() as u32).to_be_bytes());
    for (id, addr) in learner_addrs {
        buf.extend_from_slice(&id.to_be_bytes());
        buf.extend_from_slice(&(addr.len() as u16).to_be_bytes());
        buf.extend_from_slice(addr.as_bytes());
    }
    buf.extend_from_slice(sm);
    buf
}

pub(crate) fn decode_snapshot_data(data: &[u8]) -> Result<(BTreeMap<u64, String>, &[u8]), String> {
    fn take<'a>(data: &mut &'a [u8], n: usize) -> Result<&'a [u8], String> {
        if data.len() < n {
            return Err("snapshot data is truncated".to_owned());
        }
        let (head, rest) = data.split_at(n);
        *data = rest;
        Ok(head)
    }
    let mut rest = data;
    let version = take(&mut rest, 1)?[0];
    if version != SNAPSHOT_DATA_VERSION {
        return Err(format!(
            "snapshot data version {version} is not {SNAPSHOT_DATA_VERSION}"
        ));
    }
    let mut word = [0u8; 8];
    let mut count = [0u8; 4];
    count.copy_from_slice(take(&mut rest, 4)?);
    let mut learners = BTreeMap::new();
    for _ in 0..u32::from_be_bytes(count) {
        word.copy_from_slice(take(&mut rest, 8)?);
        let mut len = [0u8; 2];
        len.copy_from_slice(take(&mut rest, 2)?);
        let addr = take(&mut rest, u16::from_be_bytes(len) as usize)?;
        let addr = String::from_utf8(addr.to_vec()).map_err(|_| "learner address is not UTF-8".to_owned())?;
        learners.insert(u64::from_be_bytes(word), addr);
    }
    Ok((learners, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_data_round_trips_and_rejects_truncation() {
        let mut learners = BTreeMap::new();
        learners.insert(4, "127.0.0.1:9093".to_owned());
        let data = encode_snapshot_data(&learners, b"image");
        let (got, sm) = decode_snapshot_data(&data).unwrap();
        assert_eq!(got, learners);
        assert_eq!(sm, b"image");
        assert!(decode_snapshot_data(&data[..8]).is_err());
        assert!(decode_snapshot_data(&[]).is_err());
    }
}
