//! The records a group coordinator keeps in `__consumer_offsets`, in Kafka's own key/value
//! formats (`OffsetCommitKey`/`OffsetCommitValue`, `GroupMetadataKey`/`GroupMetadataValue`), so
//! a Kafka operator's tools read them as they read Kafka's.
//!
//! Keys start with an int16 version: 0 and 1 are offset commits, 2 is group metadata, 3 and 5-8
//! a KIP-848 consumer group's records (`consumer_records.rs`), and Sluice's own 1000 a
//! share-partition's state (`share_state_records.rs`). A record
//! with a null value is a tombstone: the offset or the group is gone. Everything decoded here
//! came from disk and is checked: a length or count never allocates beyond the bytes present.

use bytes::{BufMut, Bytes, BytesMut};

use super::consumer_records::{
    ConsumerRecord, CURRENT_ASSIGNMENT_TYPE, GROUP_EPOCH_TYPE, MEMBER_METADATA_TYPE, TARGET_EPOCH_TYPE,
    TARGET_MEMBER_TYPE,
};
pub(crate) use super::record_codec::{put_string, Reader, RecordError};
use super::share_state_records;
use crate::share::state::ShareState;

/// The key version Kafka writes for offset commits.
const OFFSET_COMMIT_KEY_VERSION: i16 = 1;
const GROUP_METADATA_KEY_VERSION: i16 = 2;
/// OffsetCommitValue v3: offset, leader epoch, metadata, commit timestamp.
const OFFSET_COMMIT_VALUE_VERSION: i16 = 3;
/// GroupMetadataValue v3: adds `groupInstanceId` to members.
const GROUP_METADATA_VALUE_VERSION: i16 = 3;

/// A committed offset as stored (Kafka's `OffsetAndMetadata`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetAndMetadata {
    pub offset: i64,
    /// The leader epoch of the record at `offset - 1` as the client saw it; -1 if unknown.
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
}

/// One member as stored in the group's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    /// The member's metadata for the group's selected protocol.
    pub subscription: Bytes,
    pub assignment: Bytes,
}

/// A group as stored after each completed rebalance (Kafka's `GroupMetadataValue`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredGroup {
    pub protocol_type: String,
    pub generation_id: i32,
    pub protocol_name: Option<String>,
    pub leader_id: Option<String>,
    pub current_state_timestamp_ms: i64,
    pub members: Vec<StoredMember>,
}

/// A decoded `__consumer_offsets` record; `None` values are tombstones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupRecord {
    Offset {
        group_id: String,
        topic: String,
        partition: i32,
        value: Option<OffsetAndMetadata>,
    },
    Group {
        group_id: String,
        value: Option<StoredGroup>,
    },
    /// A KIP-848 consumer group's record (`consumer_records.rs`).
    Consumer(ConsumerRecord),
    /// A share-partition's state (KIP-932, `share_state_records.rs`).
    ShareState {
        group_id: String,
        topic_id: uuid::Uuid,
        partition: i32,
        value: Option<ShareState>,
    },
}

pub fn offset_commit_key(group_id: &str, topic: &str, partition: i32) -> Bytes {
    let mut buf = BytesMut::with_capacity(10 + group_id.len() + topic.len());
    buf.put_i16(OFFSET_COMMIT_KEY_VERSION);
    put_string(&mut buf, group_id);
    put_string(&mut buf, topic);
    buf.put_i32(partition);
    buf.freeze()
}

pub fn offset_commit_value(value: &OffsetAndMetadata) -> Bytes {
    let mut buf = BytesMut::with_capacity(24 + value.metadata.len());
    buf.put_i16(OFFSET_COMMIT_VALUE_VERSION);
    buf.put_i64(value.offset);
    buf.put_i32(value.leader_epoch);
    put_string(&mut buf, &value.metadata);
    buf.put_i64(value.commit_timestamp_ms);
    buf.freeze()
}

pub fn group_metadata_key(group_id: &str) -> Bytes {
    let mut buf = BytesMut::with_capacity(4 + group_id.len());
    buf.put_i16(GROUP_METADATA_KEY_VERSION);
    put_string(&mut buf, group_id);
    buf.freeze()
}

pub fn group_metadata_value(group: &StoredGroup) -> Bytes {
    let members_len: usize = group
        .members
        .iter()
        .map(|m| {
            40 + m.member_id.len() + m.client_id.len() + m.client_host.len() + m.subscription.len() + m.assignment.len()
        })
        .sum();
    let mut buf = BytesMut::with_capacity(64 + group.protocol_type.len() + members_len);
    buf.put_i16(GROUP_METADATA_VALUE_VERSION);
    put_string(&mut buf, &group.protocol_type);
    buf.put_i32(group.generation_id);
    put_nullable_string(&mut buf, group.protocol_name.as_deref());
    put_nullable_string(&mut buf, group.leader_id.as_deref());
    buf.put_i64(group.current_state_timestamp_ms);
    buf.put_i32(group.members.len() as i32);
    for m in &group.members {
        put_string(&mut buf, &m.member_id);
        put_nullable_string(&mut buf, m.group_instance_id.as_deref());
        put_string(&mut buf, &m.client_id);
        put_string(&mut buf, &m.client_host);
        buf.put_i32(m.rebalance_timeout_ms);
        buf.put_i32(m.session_timeout_ms);
        put_bytes(&mut buf, &m.subscription);
        put_bytes(&mut buf, &m.assignment);
    }
    buf.freeze()
}

/// Decodes one record of `__consumer_offsets`.
impl GroupRecord {
    /// The record's key and value (`None`: a tombstone).
    pub fn encode(&self) -> (Bytes, Option<Bytes>) {
        match self {
            GroupRecord::Offset {
                group_id,
                topic,
                partition,
                value,
            } => (
                offset_commit_key(group_id, topic, *partition),
                value.as_ref().map(offset_commit_value),
            ),
            GroupRecord::Group { group_id, value } => {
                (group_metadata_key(group_id), value.as_ref().map(group_metadata_value))
            }
            GroupRecord::Consumer(record) => record.encode(),
            GroupRecord::ShareState {
                group_id,
                topic_id,
                partition,
                value,
            } => (
                share_state_records::key(group_id, *topic_id, *partition),
                value.as_ref().map(share_state_records::value),
            ),
        }
    }
}

pub fn decode(key: Option<&[u8]>, value: Option<&[u8]>) -> Result<GroupRecord, RecordError> {
    let mut k = Reader(key.ok_or(RecordError::NoKey)?);
    match k.i16("key version")? {
        0 | 1 => {
            let group_id = k.string("group")?;
            let topic = k.string("topic")?;
            let partition = k.i32("partition")?;
            let value = value.map(decode_offset_value).transpose()?;
            Ok(GroupRecord::Offset {
                group_id,
                topic,
                partition,
                value,
            })
        }
        2 => {
            let group_id = k.string("group")?;
            let value = value.map(decode_group_value).transpose()?;
            Ok(GroupRecord::Group { group_id, value })
        }
        t @ (GROUP_EPOCH_TYPE
        | MEMBER_METADATA_TYPE
        | TARGET_EPOCH_TYPE
        | TARGET_MEMBER_TYPE
        | CURRENT_ASSIGNMENT_TYPE) => ConsumerRecord::decode(t, &mut k, value).map(GroupRecord::Consumer),
        share_state_records::SHARE_STATE_TYPE => {
            let (group_id, topic_id, partition) = share_state_records::decode_key(&mut k)?;
            let value = value.map(share_state_records::decode_value).transpose()?;
            Ok(GroupRecord::ShareState {
                group_id,
                topic_id,
                partition,
                value,
            })
        }
        v => Err(RecordError::UnknownKeyVersion(v)),
    }
}

fn decode_offset_value(value: &[u8]) -> Result<OffsetAndMetadata, RecordError> {
    let mut r = Reader(value);
    let version = r.i16("value version")?;
    if !(0..=3).contains(&version) {
        return Err(RecordError::UnknownValueVersion(version));
    }
    let offset = r.i64("offset")?;
    let leader_epoch = if version >= 3 { r.i32("leader epoch")? } else { -1 };
    let metadata = r.string("metadata")?;
    let commit_timestamp_ms = r.i64("commit timestamp")?;
    Ok(OffsetAndMetadata {
        offset,
        leader_epoch,
        metadata,
        commit_timestamp_ms,
    })
}

fn decode_group_value(value: &[u8]) -> Result<StoredGroup, RecordError> {
    let mut r = Reader(value);
    let version = r.i16("value version")?;
    if !(0..=3).contains(&version) {
        return Err(RecordError::UnknownValueVersion(version));
    }
    let protocol_type = r.string("protocol type")?;
    let generation_id = r.i32("generation")?;
    let protocol_name = r.nullable_string("protocol")?;
    let leader_id = r.nullable_string("leader")?;
    let current_state_timestamp_ms = if version >= 2 { r.i64("state timestamp")? } else { -1 };
    let count = r.i32("member count")?.max(0) as usize;
    // Each member takes at least 28 bytes: never reserve more than the bytes can hold.
    let mut members = Vec::with_capacity(count.min(r.0.len() / 28));
    for _ in 0..count {
        let member_id = r.string("member id")?;
        let group_instance_id = if version >= 3 {
            r.nullable_string("instance id")?
        } else {
            None
        };
        let client_id = r.string("client id")?;
        let client_host = r.string("client host")?;
        let rebalance_timeout_ms = if version >= 1 { r.i32("rebalance timeout")? } else { -1 };
        let session_timeout_ms = r.i32("session timeout")?;
        let subscription = r.bytes("subscription")?;
        let assignment = r.bytes("assignment")?;
        members.push(StoredMember {
            member_id,
            group_instance_id,
            client_id,
            client_host,
            rebalance_timeout_ms: if rebalance_timeout_ms < 0 {
                session_timeout_ms
            } else {
                rebalance_timeout_ms
            },
            session_timeout_ms,
            subscription,
            assignment,
        });
    }
    Ok(StoredGroup {
        protocol_type,
        generation_id,
        protocol_name,
        leader_id,
        current_state_timestamp_ms,
        members,
    })
}

fn put_nullable_string(buf: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_string(buf, s),
        None => buf.put_i16(-1),
    }
}

fn put_bytes(buf: &mut BytesMut, b: &[u8]) {
    buf.put_i32(b.len() as i32);
    buf.put_slice(b);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_commits_round_trip_in_kafkas_layout() {
        let key = offset_commit_key("g", "orders", 7);
        // version 1, "g", "orders", 7
        assert_eq!(&key[..], b"\x00\x01\x00\x01g\x00\x06orders\x00\x00\x00\x07");
        let value = OffsetAndMetadata {
            offset: 42,
            leader_epoch: 3,
            metadata: "m".into(),
            commit_timestamp_ms: 1000,
        };
        let decoded = decode(Some(&key), Some(&offset_commit_value(&value))).unwrap();
        assert_eq!(
            decoded,
            GroupRecord::Offset {
                group_id: "g".into(),
                topic: "orders".into(),
                partition: 7,
                value: Some(value)
            }
        );
        let tombstone = decode(Some(&key), None).unwrap();
        assert!(matches!(tombstone, GroupRecord::Offset { value: None, .. }));
    }

    #[test]
    fn group_metadata_round_trips() {
        let group = StoredGroup {
            protocol_type: "consumer".into(),
            generation_id: 5,
            protocol_name: Some("range".into()),
            leader_id: Some("m-1".into()),
            current_state_timestamp_ms: 77,
            members: vec![StoredMember {
                member_id: "m-1".into(),
                group_instance_id: Some("i-1".into()),
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                rebalance_timeout_ms: 300_000,
                session_timeout_ms: 45_000,
                subscription: Bytes::from_static(b"sub"),
                assignment: Bytes::from_static(b"asg"),
            }],
        };
        let decoded = decode(Some(&group_metadata_key("g")), Some(&group_metadata_value(&group))).unwrap();
        assert_eq!(
            decoded,
            GroupRecord::Group {
                group_id: "g".into(),
                value: Some(group)
            }
        );
    }

    #[test]
    fn damaged_records_are_errors_not_panics() {
        let key = group_metadata_key("g");
        assert!(decode(Some(&key[..3]), None).is_err());
        assert!(decode(None, None).is_err());
        assert!(decode(Some(b"\x00\x09"), None).is_err());
        // A member count far beyond the bytes present.
        let mut value = BytesMut::new();
        value.put_i16(3);
        put_string(&mut value, "consumer");
        value.put_i32(1);
        value.put_i16(-1);
        value.put_i16(-1);
        value.put_i64(0);
        value.put_i32(i32::MAX);
        assert!(matches!(
            decode(Some(&key), Some(&value)),
            Err(RecordError::Truncated(_))
        ));
    }
}
