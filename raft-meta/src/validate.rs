//! Checks every message from a peer before `RawNode::step` sees it.
//!
//! raft-rs trusts its peers: a message whose fields contradict the receiver's log reaches one of
//! its `fatal!`s (a panic) or quietly corrupts its progress tracking. A peer that passed the
//! handshake knows the cluster secret, but a bug, a version skew or a compromised node must
//! still not be able to take a member down, so each message is refused (and logged by the
//! driver) unless it is one that raft-rs 0.7 handles safely. The checks, with the raft-rs
//! panics they keep out of reach:
//!
//! * The sender is the authenticated peer, the message is addressed to this node, the sender is
//!   a voter or learner, and the type is one members exchange (never a local type such as
//!   `MsgHup`, nor read-index or leader-transfer messages, which Sluice does not use).
//! * Only a forwarded proposal has term 0: raft-rs treats term 0 as local and skips its term
//!   checks (a term-0 vote request makes it panic: "term should be set when sending").
//!   A proposal is not empty ("stepped empty MsgProp").
//! * Entries (appended or proposed) are contiguous from `index + 1` with terms that never go
//!   backwards, are at least `log_term` and at most the message's term, and are never 0
//!   (otherwise `maybe_append` slices out of range, "entry X conflict with committed entry Y",
//!   or a gap in the unstable log). Configuration changes in them are what Sluice proposes:
//!   adding a learner that is not a voter (anything else would fail when applied and stop
//!   every member).
//! * An append after an index beyond this node's log must carry a real `log_term`: raft-rs
//!   reads the term of a missing index as 0, so `log_term = 0` would "match" and commit
//!   past the log ("to_commit X is out of range [last_index Y]").
//! * A heartbeat's commit index is within this node's log (raft-rs commits it unchecked, same
//!   panic).
//! * A snapshot has a real index and term (term 0 hits the same 0-term match and panic), a
//!   configuration with exactly the configured voters and no joint state (else "unable to
//!   restore config"), and data the driver can decode.
//! * An append response to the leader acknowledges no index beyond the leader's log, and asks
//!   for no snapshot (Sluice never requests one).

use std::collections::BTreeMap;

use prost::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeType, Entry, EntryType, Message, MessageType, Snapshot};
use raft::INVALID_INDEX;

use crate::snapshot_data::decode_snapshot_data;
use crate::{node_id_of, node_ids};

/// Longest learner address a configuration change may carry (as `Quorum::add_learner` allows).
const MAX_LEARNER_ADDR_BYTES: usize = 255;

/// What the receiving node knows that a message is checked against.
pub(crate) struct Receiver<'a> {
    pub(crate) node_id: u64,
    pub(crate) voters: &'a BTreeMap<u64, String>,
    pub(crate) learners: &'a BTreeMap<u64, String>,
    /// Last index of this node's Raft log (stable and unstable).
    pub(crate) last_index: u64,
    pub(crate) is_leader: bool,
}

/// `Err` says, in a sentence, why the message must not reach raft-rs.
pub(crate) fn check_peer_message(msg: &Message, peer_id: u64, at: &Receiver<'_>) -> Result<(), String> {
    if msg.from != peer_id {
        return Err(format!(
            "it claims to come from node {} but the connection authenticated as node {}",
            node_id_of(msg.from),
            node_id_of(peer_id)
        ));
    }
    if msg.to != at.node_id {
        return Err(format!(
            "it is addressed to node {}, not to this node",
            node_id_of(msg.to)
        ));
    }
    if !at.voters.contains_key(&msg.from) && !at.learners.contains_key(&msg.from) {
        return Err(format!(
            "node {} is neither a voter nor a learner of this quorum",
            node_id_of(msg.from)
        ));
    }
    // prost keeps an enum field's raw number; raft-rs's getters read an unknown one as the
    // default (MsgHup, EntryNormal). Name it instead of letting it pass as that default.
    if MessageType::try_from(msg.msg_type).is_err() {
        return Err(format!("its message type {} is unknown", msg.msg_type));
    }
    let kind = msg.get_msg_type();
    let is_proposal = kind == MessageType::MsgPropose;
    if !is_peer_type(kind) {
        return Err(format!("{kind:?} is never sent between Sluice quorum members"));
    }
    if is_proposal != (msg.term == 0) {
        return Err(format!(
            "{kind:?} with term {} (only a forwarded proposal has term 0)",
            msg.term
        ));
    }
    match kind {
        MessageType::MsgPropose => check_proposal(msg, at),
        MessageType::MsgAppend => check_append(msg, at),
        MessageType::MsgHeartbeat => check_heartbeat(msg, at),
        MessageType::MsgSnapshot => check_snapshot(msg.get_snapshot(), msg.term, at),
        MessageType::MsgAppendResponse => check_append_response(msg, at),
        _ => Ok(()),
    }
}

fn is_peer_type(kind: MessageType) -> bool {
    matches!(
        kind,
        MessageType::MsgPropose
            | MessageType::MsgAppend
            | MessageType::MsgAppendResponse
            | MessageType::MsgHeartbeat
            | MessageType::MsgHeartbeatResponse
            | MessageType::MsgSnapshot
            | MessageType::MsgRequestVote
            | MessageType::MsgRequestVoteResponse
            | MessageType::MsgRequestPreVote
            | MessageType::MsgRequestPreVoteResponse
    )
}

fn check_proposal(msg: &Message, at: &Receiver<'_>) -> Result<(), String> {
    if msg.entries.is_empty() {
        return Err("it is a proposal without entries".to_owned());
    }
    msg.entries.iter().try_for_each(|e| check_entry_payload(e, at))
}

fn check_append(msg: &Message, at: &Receiver<'_>) -> Result<(), String> {
    if msg.log_term > msg.term {
        return Err(format!(
            "it appends after an entry of term {} in term {}",
            msg.log_term, msg.term
        ));
    }
    if msg.index > at.last_index && msg.log_term == 0 {
        return Err(format!(
            "it appends after index {} with term 0 but this node's log ends at {}; raft-rs would commit index {} beyond the log",
            msg.index,
            at.last_index,
            msg.commit.min(msg.index.saturating_add(msg.entries.len() as u64))
        ));
    }
    let mut expected_index = msg.index;
    let mut previous_term = msg.log_term;
    for entry in msg.entries.iter() {
        expected_index = expected_index
            .checked_add(1)
            .ok_or_else(|| "its entry indexes overflow".to_owned())?;
        if entry.index != expected_index {
            return Err(format!(
                "its entries are not contiguous from index {}: found {} where {expected_index} belongs",
                msg.index + 1,
                entry.index
            ));
        }
        if entry.term == 0 || entry.term < previous_term || entry.term > msg.term {
            return Err(format!(
                "entry {} has term {}, outside {}..={} (terms never go backwards nor beyond the message's term)",
                entry.index,
                entry.term,
                previous_term.max(1),
                msg.term
            ));
        }
        previous_term = entry.term;
        check_entry_payload(entry, at)?;
    }
    Ok(())
}

/// Sluice replicates normal entries and learner additions; nothing else may be committed.
fn check_entry_payload(entry: &Entry, at: &Receiver<'_>) -> Result<(), String> {
    if EntryType::try_from(entry.entry_type).is_err() {
        return Err(format!(
            "entry {} has the unknown entry type {}",
            entry.index, entry.entry_type
        ));
    }
    match entry.get_entry_type() {
        EntryType::EntryNormal => Ok(()),
        EntryType::EntryConfChangeV2 => Err(format!(
            "entry {} is a joint configuration change, which Sluice never proposes",
            entry.index
        )),
        EntryType::EntryConfChange => {
            if entry.data.is_empty() {
                return Ok(()); // a change the leader refused and blanked
            }
            let change = ConfChange::decode(entry.data.as_ref())
                .map_err(|e| format!("entry {} holds an undecodable configuration change: {e}", entry.index))?;
            let (id, node) = (change.node_id, node_id_of(change.node_id));
            if change.get_change_type() != ConfChangeType::AddLearnerNode {
                return Err(format!(
                    "entry {} would {:?} node {node}; Sluice only adds learners (voters are fixed by --voters)",
                    entry.index,
                    change.get_change_type()
                ));
            }
            if id == 0 || at.voters.contains_key(&id) {
                return Err(format!(
                    "entry {} would add node {node} as a learner, but it is reserved or a voter",
                    entry.index
                ));
            }
            if change.context.is_empty()
                || change.context.len() > MAX_LEARNER_ADDR_BYTES
                || std::str::from_utf8(&change.context).is_err()
            {
                return Err(format!(
                    "entry {} would add learner {node} without a valid host:port address",
                    entry.index
                ));
            }
            Ok(())
        }
    }
}

fn check_heartbeat(msg: &Message, at: &Receiver<'_>) -> Result<(), String> {
    if msg.commit > at.last_index {
        return Err(format!(
            "its commit index {} is beyond this node's log, which ends at {} (a leader only sends what a follower has acknowledged)",
            msg.commit, at.last_index
        ));
    }
    if !msg.entries.is_empty() || msg.has_snapshot() {
        return Err("a heartbeat carries neither entries nor a snapshot".to_owned());
    }
    Ok(())
}

fn check_snapshot(snapshot: &Snapshot, term: u64, at: &Receiver<'_>) -> Result<(), String> {
    let meta = snapshot.get_metadata();
    if meta.index == 0 || meta.term == 0 || meta.term > term {
        return Err(format!(
            "its snapshot claims index {} and term {} in a message of term {term}",
            meta.index, meta.term
        ));
    }
    let conf = meta.get_conf_state();
    if !conf.voters_outgoing.is_empty() || !conf.learners_next.is_empty() || conf.auto_leave {
        return Err("its snapshot holds a joint configuration, which Sluice never uses".to_owned());
    }
    let mut voters = conf.voters.clone();
    voters.sort_unstable();
    let configured: Vec<u64> = at.voters.keys().copied().collect();
    if voters != configured {
        return Err(format!(
            "its snapshot names voters {:?} but this quorum's voters are {:?}",
            node_ids(&conf.voters),
            node_ids(&configured)
        ));
    }
    let mut learners = conf.learners.clone();
    learners.sort_unstable();
    learners.dedup();
    if learners.len() != conf.learners.len() || learners.iter().any(|id| *id == 0 || at.voters.contains_key(id)) {
        return Err(format!(
            "its snapshot lists learners {:?}, which repeat, are reserved, or are voters",
            conf.learners
        ));
    }
    decode_snapshot_data(&snapshot.data).map_err(|e| format!("its snapshot data is unreadable: {e}"))?;
    Ok(())
}

fn check_append_response(msg: &Message, at: &Receiver<'_>) -> Result<(), String> {
    if msg.request_snapshot != INVALID_INDEX {
        return Err(format!(
            "it requests a snapshot at index {}, which Sluice members never do",
            msg.request_snapshot
        ));
    }
    if at.is_leader && !msg.reject && msg.index > at.last_index {
        return Err(format!(
            "it acknowledges index {} but the leader's log ends at {}",
            msg.index, at.last_index
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! Each forged message is checked twice: the validator refuses it, and a real raft-rs node
    //! in the same state panics (or is corrupted) when the message is stepped anyway — so every
    //! check here guards against something that actually happens.

    use std::panic::{catch_unwind, AssertUnwindSafe};

    use raft::eraftpb::ConfState;
    use raft::storage::MemStorage;
    use raft::RawNode;

    use super::*;
    use crate::snapshot_data::encode_snapshot_data;

    /// Node 2 of voters {1, 2, 3} in term 2, following leader 1, with entries 1..=5 of which
    /// 1..=3 are committed.
    fn follower() -> RawNode<MemStorage> {
        follower_of(1)
    }

    /// [`follower`] with another (or no, `INVALID_ID`) leader.
    fn follower_of(leader: u64) -> RawNode<MemStorage> {
        let storage = MemStorage::new_with_conf_state(ConfState::from((vec![1, 2, 3], vec![])));
        let entries: Vec<Entry> = (1..=5).map(|i| entry(i, if i == 1 { 1 } else { 2 })).collect();
        storage.wl().append(&entries).unwrap();
        let mut hs = raft::eraftpb::HardState::default();
        hs.term = 2;
        hs.commit = 3;
        storage.wl().set_hardstate(hs);
        let config = raft::Config {
            id: 2,
            election_tick: 10,
            heartbeat_tick: 2,
            applied: 3,
            ..Default::default()
        };
        let mut node = RawNode::new(&config, storage, &crate::logger::raft_logger()).unwrap();
        node.raft.become_follower(2, leader);
        node
    }

    fn entry(index: u64, term: u64) -> Entry {
        let mut e = Entry::default();
        e.index = index;
        e.term = term;
        e
    }

    fn message(kind: MessageType, from: u64, term: u64) -> Message {
        let mut m = Message::default();
        m.set_msg_type(kind);
        m.from = from;
        m.to = 2;
        m.term = term;
        m
    }

    fn voters() -> BTreeMap<u64, String> {
        (1..=3).map(|id| (id, format!("127.0.0.1:{}", 9000 + id))).collect()
    }

    /// An append from leader 1 after (`index`, `log_term`) of `(index, term)` entries.
    fn append(term: u64, index: u64, log_term: u64, entries: &[(u64, u64)]) -> Message {
        let mut m = message(MessageType::MsgAppend, 1, term);
        m.index = index;
        m.log_term = log_term;
        m.set_entries(entries.iter().map(|&(i, t)| entry(i, t)).collect());
        m
    }

    /// Checks `msg` as node 2 would with a log ending at `last_index`.
    fn check_at(msg: &Message, peer: u64, last_index: u64, is_leader: bool) -> Result<(), String> {
        let voters = voters();
        let learners = BTreeMap::new();
        let at = Receiver {
            node_id: 2,
            voters: &voters,
            learners: &learners,
            last_index,
            is_leader,
        };
        check_peer_message(msg, peer, &at)
    }

    fn check(node: &RawNode<MemStorage>, msg: &Message, peer: u64) -> Result<(), String> {
        let is_leader = node.raft.state == raft::StateRole::Leader;
        check_at(msg, peer, node.raft.raft_log.last_index(), is_leader)
    }

    /// Asserts a follower of node 1 refuses `msg` with `reason` in its sentence.
    fn assert_refused(msg: &Message, reason: &str) {
        let refusal = check(&follower(), msg, msg.from).expect_err("the validator refuses it");
        assert!(refusal.contains(reason), "{refusal}");
    }

    /// Asserts the validator refuses `msg` (with `reason` in its sentence) and that stepping
    /// it into a fresh follower of `leader` panics.
    fn refused_and_would_panic(leader: u64, msg: Message, reason: &str) {
        let node = follower_of(leader);
        let refusal = check(&node, &msg, msg.from).expect_err("the validator refuses it");
        assert!(refusal.contains(reason), "{refusal}");
        let mut node = follower_of(leader);
        let stepped = catch_unwind(AssertUnwindSafe(|| node.step(msg)));
        assert!(
            stepped.is_err(),
            "raft-rs would have survived this message; the check is not needed"
        );
    }

    #[test]
    fn heartbeat_with_commit_beyond_the_log_is_refused() {
        let mut m = message(MessageType::MsgHeartbeat, 1, 2);
        m.commit = 1_000_000;
        refused_and_would_panic(1, m, "beyond this node's log");
    }

    #[test]
    fn append_after_a_missing_index_with_term_zero_is_refused() {
        let mut m = append(2, 100, 0, &[]);
        m.commit = 1_000_000;
        refused_and_would_panic(1, m, "log ends at 5");
    }

    #[test]
    fn entries_with_a_gap_are_refused_as_raft_rs_would_store_them_under_wrong_indexes() {
        let m = append(2, 5, 2, &[(6, 2), (8, 2)]);
        assert_refused(&m, "found 8 where 7 belongs");
        let mut node = follower();
        node.step(m).unwrap();
        assert_eq!(node.raft.raft_log.last_index(), 7, "entry 8 now sits at index 7");
    }

    #[test]
    fn entries_that_repeat_an_index_are_refused() {
        // All three "match" the log, so raft-rs commits index + 3 = 6 of a log ending at 5.
        let mut m = append(2, 3, 2, &[(4, 2), (5, 2), (5, 2)]);
        m.commit = 6;
        refused_and_would_panic(1, m, "not contiguous");
    }

    #[test]
    fn entry_terms_that_go_backwards_are_refused() {
        assert_refused(&append(3, 5, 2, &[(6, 3), (7, 2)]), "entry 7 has term 2");
    }

    #[test]
    fn an_entry_of_unknown_type_is_refused_by_number() {
        // Decoded from the wire, as a peer would send it: prost keeps the raw number, which
        // raft-rs's getter would read as EntryNormal.
        let mut m = append(2, 5, 2, &[(6, 2)]);
        m.entries[0].entry_type = 7;
        let m = Message::decode(m.encode_to_vec().as_slice()).unwrap();
        assert_refused(&m, "entry 6 has the unknown entry type 7");
    }

    #[test]
    fn vote_request_with_term_zero_is_refused() {
        let mut m = message(MessageType::MsgRequestVote, 3, 0);
        m.index = 10;
        m.log_term = 5;
        // Without a leader node 2 grants it, answering with the request's term 0.
        refused_and_would_panic(raft::INVALID_ID, m, "term 0");
    }

    /// prost keeps an enum value it does not know; reading it must not panic (protobuf-build's
    /// accessor did, and it reads as the default `MsgHup`); the validator names the number.
    #[test]
    fn message_of_unknown_type_is_refused_not_a_panic() {
        let mut m = message(MessageType::MsgHeartbeat, 1, 2);
        m.msg_type = 99;
        let decoded = Message::decode(m.encode_to_vec().as_slice()).unwrap();
        assert_eq!(decoded.msg_type, 99);
        let refusal = check_at(&decoded, 1, 5, false).unwrap_err();
        assert!(refusal.contains("message type 99 is unknown"), "{refusal}");
    }

    #[test]
    fn empty_proposal_to_the_leader_is_refused() {
        let m = message(MessageType::MsgPropose, 3, 0);
        let refusal = check_at(&m, 3, 5, true).unwrap_err();
        assert!(refusal.contains("without entries"), "{refusal}");
    }

    #[test]
    fn snapshot_with_term_zero_or_other_voters_is_refused() {
        let mut m = message(MessageType::MsgSnapshot, 1, 2);
        let meta = m.mut_snapshot().mut_metadata();
        meta.index = 1_000;
        meta.term = 0;
        meta.set_conf_state(ConfState::from((vec![1, 2, 3], vec![])));
        m.mut_snapshot().data = encode_snapshot_data(&BTreeMap::new(), b"").into();
        refused_and_would_panic(1, m.clone(), "term 0");

        m.mut_snapshot().mut_metadata().term = 2;
        m.mut_snapshot()
            .mut_metadata()
            .set_conf_state(ConfState::from((vec![2, 4], vec![2])));
        assert_refused(&m, "voters [1, 3]");

        m.mut_snapshot()
            .mut_metadata()
            .set_conf_state(ConfState::from((vec![1, 2, 3], vec![])));
        m.mut_snapshot().data = b"not snapshot data".to_vec().into();
        assert_refused(&m, "unreadable");
    }

    #[test]
    fn sender_other_than_the_authenticated_peer_is_refused_and_state_is_unchanged() {
        let node = follower();
        let mut m = message(MessageType::MsgRequestVote, 3, 9);
        m.index = 10;
        m.log_term = 9;
        let refusal = check(&node, &m, 1).unwrap_err();
        // Raft id 1 is node 0 (node ids are raft ids - 1).
        assert!(refusal.contains("authenticated as node 0"), "{refusal}");
        let refusal = check(&node, &message(MessageType::MsgHup, 1, 2), 1).unwrap_err();
        assert!(refusal.contains("never sent"), "{refusal}");
        let mut to_other = message(MessageType::MsgHeartbeat, 1, 2);
        to_other.to = 3;
        assert!(check(&node, &to_other, 1).unwrap_err().contains("addressed to node 2"));
        let stranger = message(MessageType::MsgHeartbeat, 7, 2);
        assert!(check(&node, &stranger, 7).unwrap_err().contains("neither a voter"));
        // Nothing was stepped: the follower is where it was.
        assert_eq!(
            (node.raft.term, node.raft.leader_id, node.raft.raft_log.committed),
            (2, 1, 3)
        );
    }

    #[test]
    fn configuration_changes_other_than_adding_a_learner_are_refused() {
        let proposal = |change_type: ConfChangeType, id: u64| {
            let mut change = ConfChange::default();
            change.set_change_type(change_type);
            change.node_id = id;
            change.context = b"127.0.0.1:9999".to_vec().into();
            let mut e = Entry::default();
            e.set_entry_type(EntryType::EntryConfChange);
            e.data = change.encode_to_vec().into();
            let mut m = message(MessageType::MsgPropose, 3, 0);
            m.set_entries(vec![e]);
            m
        };
        assert!(check_at(&proposal(ConfChangeType::RemoveNode, 1), 3, 5, true)
            .unwrap_err()
            .contains("only adds learners"));
        assert!(check_at(&proposal(ConfChangeType::AddLearnerNode, 2), 3, 5, true)
            .unwrap_err()
            .contains("is reserved or a voter"));
        check_at(&proposal(ConfChangeType::AddLearnerNode, 4), 3, 5, true).unwrap();
    }

    #[test]
    fn ordinary_replication_messages_pass() {
        let node = follower();
        let mut replicate = append(2, 5, 2, &[(6, 2), (7, 2)]);
        replicate.commit = 7;
        check(&node, &replicate, 1).unwrap();
        let mut heartbeat = message(MessageType::MsgHeartbeat, 1, 2);
        heartbeat.commit = 5;
        check(&node, &heartbeat, 1).unwrap();
        // Beyond the log, with a real term: raft-rs rejects it with a hint.
        check(&node, &append(2, 40, 2, &[]), 1).unwrap();
        let mut vote = message(MessageType::MsgRequestPreVote, 3, 3);
        vote.index = 5;
        vote.log_term = 2;
        check(&node, &vote, 3).unwrap();
    }
}
