//! KIP-848 consumer group records in `__consumer_offsets`, in Kafka 4's layouts (record types
//! 3, 5, 6, 7 and 8 of its group coordinator), so that a coordinator taking over a partition
//! rebuilds every consumer group with its epochs, members, target and current assignments:
//!
//! | type | key | value |
//! |---|---|---|
//! | 3 `ConsumerGroupMetadata` | group | group epoch |
//! | 5 `ConsumerGroupMemberMetadata` | group, member | instance, rack, client, subscription, assignor, rebalance timeout |
//! | 6 `ConsumerGroupTargetAssignmentMetadata` | group | assignment epoch |
//! | 7 `ConsumerGroupTargetAssignmentMember` | group, member | target partitions |
//! | 8 `ConsumerGroupCurrentMemberAssignment` | group, member | member epoch, previous epoch, state, assigned and revoking partitions |
//!
//! Keys are the record type (int16) and fixed-width strings; values an int16 version (0) and
//! a flexible structure (compact strings and arrays, tagged fields). A null value is a
//! tombstone. Checked as everything read from disk: no allocation beyond the bytes present.

use std::collections::{BTreeMap, BTreeSet};

use bytes::{BufMut, Bytes, BytesMut};
use uuid::Uuid;

use super::assignor::Assignment;
use super::record_codec::{compact_len, put_string, put_uvarint, skip_tagged_fields, uvarint, Reader, RecordError};

pub const GROUP_EPOCH_TYPE: i16 = 3;
pub const MEMBER_METADATA_TYPE: i16 = 5;
pub const TARGET_EPOCH_TYPE: i16 = 6;
pub const TARGET_MEMBER_TYPE: i16 = 7;
pub const CURRENT_ASSIGNMENT_TYPE: i16 = 8;

/// A member's subscription and identity as stored (type 5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredConsumerMember {
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: Vec<String>,
    pub subscribed_topic_regex: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub server_assignor: Option<String>,
    /// Set for a member that speaks the classic protocol inside a consumer group (online
    /// migration): Kafka's tagged `ClassicMemberMetadata` (tag 0).
    pub classic: Option<StoredClassicMember>,
}

/// A classic member's JoinGroup session timeout and protocols, kept with its consumer group
/// record so a coordinator taking over can answer its SyncGroup and convert the group back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredClassicMember {
    pub session_timeout_ms: i32,
    /// (protocol name, `ConsumerProtocolSubscription` bytes), in the member's order.
    pub protocols: Vec<(String, Bytes)>,
}

/// A member's reconciliation state as stored (type 8). `state` is Kafka's byte: 0 stable,
/// 1 unrevoked partitions, 2 unreleased partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMemberAssignment {
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    pub state: i8,
    pub assigned: Assignment,
    pub pending_revocation: Assignment,
}

/// A consumer group record; `None` values are tombstones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConsumerRecord {
    GroupEpoch {
        group_id: String,
        epoch: Option<i32>,
    },
    Member {
        group_id: String,
        member_id: String,
        value: Option<StoredConsumerMember>,
    },
    TargetEpoch {
        group_id: String,
        epoch: Option<i32>,
    },
    TargetMember {
        group_id: String,
        member_id: String,
        value: Option<Assignment>,
    },
    CurrentAssignment {
        group_id: String,
        member_id: String,
        value: Option<StoredMemberAssignment>,
    },
}

impl ConsumerRecord {
    pub fn group_id(&self) -> &str {
        match self {
            ConsumerRecord::GroupEpoch { group_id, .. }
            | ConsumerRecord::Member { group_id, .. }
            | ConsumerRecord::TargetEpoch { group_id, .. }
            | ConsumerRecord::TargetMember { group_id, .. }
            | ConsumerRecord::CurrentAssignment { group_id, .. } => group_id,
        }
    }

    /// The record's key and value (`None`: a tombstone).
    pub fn encode(&self) -> (Bytes, Option<Bytes>) {
        match self {
            ConsumerRecord::GroupEpoch { group_id, epoch } => {
                (key(GROUP_EPOCH_TYPE, group_id, None), epoch.map(epoch_value))
            }
            ConsumerRecord::TargetEpoch { group_id, epoch } => {
                (key(TARGET_EPOCH_TYPE, group_id, None), epoch.map(epoch_value))
            }
            ConsumerRecord::Member {
                group_id,
                member_id,
                value,
            } => (
                key(MEMBER_METADATA_TYPE, group_id, Some(member_id)),
                value.as_ref().map(member_value),
            ),
            ConsumerRecord::TargetMember {
                group_id,
                member_id,
                value,
            } => (
                key(TARGET_MEMBER_TYPE, group_id, Some(member_id)),
                value.as_ref().map(|a| {
                    let mut buf = value_buf(32);
                    put_assignment(&mut buf, a);
                    put_uvarint(&mut buf, 0);
                    buf.freeze()
                }),
            ),
            ConsumerRecord::CurrentAssignment {
                group_id,
                member_id,
                value,
            } => (
                key(CURRENT_ASSIGNMENT_TYPE, group_id, Some(member_id)),
                value.as_ref().map(|v| {
                    let mut buf = value_buf(64);
                    buf.put_i32(v.member_epoch);
                    buf.put_i32(v.previous_member_epoch);
                    buf.put_i8(v.state);
                    put_assignment(&mut buf, &v.assigned);
                    put_assignment(&mut buf, &v.pending_revocation);
                    put_uvarint(&mut buf, 0);
                    buf.freeze()
                }),
            ),
        }
    }

    /// Decodes a record of type `record_type` whose key's type prefix `k` has read.
    pub(crate) fn decode(
        record_type: i16,
        k: &mut Reader<'_>,
        value: Option<&[u8]>,
    ) -> Result<ConsumerRecord, RecordError> {
        let group_id = k.string("group")?;
        let mut value = match value {
            None => None,
            Some(v) => {
                let mut r = Reader(v);
                match r.i16("value version")? {
                    0 => Some(r),
                    version => return Err(RecordError::UnknownValueVersion(version)),
                }
            }
        };
        Ok(match record_type {
            GROUP_EPOCH_TYPE | TARGET_EPOCH_TYPE => {
                let epoch = value
                    .as_mut()
                    .map(|r| {
                        let epoch = r.i32("epoch")?;
                        skip_tagged_fields(r)?;
                        Ok::<_, RecordError>(epoch)
                    })
                    .transpose()?;
                if record_type == GROUP_EPOCH_TYPE {
                    ConsumerRecord::GroupEpoch { group_id, epoch }
                } else {
                    ConsumerRecord::TargetEpoch { group_id, epoch }
                }
            }
            MEMBER_METADATA_TYPE => ConsumerRecord::Member {
                member_id: k.string("member")?,
                group_id,
                value: value.as_mut().map(decode_member).transpose()?,
            },
            TARGET_MEMBER_TYPE => ConsumerRecord::TargetMember {
                member_id: k.string("member")?,
                group_id,
                value: value
                    .as_mut()
                    .map(|r| {
                        let a = assignment(r)?;
                        skip_tagged_fields(r)?;
                        Ok::<_, RecordError>(a)
                    })
                    .transpose()?,
            },
            CURRENT_ASSIGNMENT_TYPE => ConsumerRecord::CurrentAssignment {
                member_id: k.string("member")?,
                group_id,
                value: value
                    .as_mut()
                    .map(|r| {
                        let stored = StoredMemberAssignment {
                            member_epoch: r.i32("member epoch")?,
                            previous_member_epoch: r.i32("previous member epoch")?,
                            state: r.take(1, "state")?[0] as i8,
                            assigned: assignment(r)?,
                            pending_revocation: assignment(r)?,
                        };
                        skip_tagged_fields(r)?;
                        Ok::<_, RecordError>(stored)
                    })
                    .transpose()?,
            },
            other => return Err(RecordError::UnknownKeyVersion(other)),
        })
    }
}

fn key(record_type: i16, group_id: &str, member_id: Option<&str>) -> Bytes {
    let mut buf = BytesMut::with_capacity(6 + group_id.len() + member_id.map_or(0, str::len));
    buf.put_i16(record_type);
    put_string(&mut buf, group_id);
    if let Some(member_id) = member_id {
        put_string(&mut buf, member_id);
    }
    buf.freeze()
}

fn value_buf(capacity: usize) -> BytesMut {
    let mut buf = BytesMut::with_capacity(capacity);
    buf.put_i16(0);
    buf
}

fn epoch_value(epoch: i32) -> Bytes {
    let mut buf = value_buf(7);
    buf.put_i32(epoch);
    put_uvarint(&mut buf, 0);
    buf.freeze()
}

fn member_value(m: &StoredConsumerMember) -> Bytes {
    let mut buf = value_buf(64);
    put_compact_nullable(&mut buf, m.instance_id.as_deref());
    put_compact_nullable(&mut buf, m.rack_id.as_deref());
    put_compact_nullable(&mut buf, Some(&m.client_id));
    put_compact_nullable(&mut buf, Some(&m.client_host));
    put_uvarint(&mut buf, m.subscribed_topic_names.len() as u32 + 1);
    for name in &m.subscribed_topic_names {
        put_compact_nullable(&mut buf, Some(name));
    }
    put_compact_nullable(&mut buf, m.subscribed_topic_regex.as_deref());
    buf.put_i32(m.rebalance_timeout_ms);
    put_compact_nullable(&mut buf, m.server_assignor.as_deref());
    match &m.classic {
        None => put_uvarint(&mut buf, 0),
        Some(classic) => {
            // One tagged field (tag 0): a present nullable struct (byte 1), then the struct.
            let mut field = BytesMut::new();
            field.put_i8(1);
            field.put_i32(classic.session_timeout_ms);
            put_uvarint(&mut field, classic.protocols.len() as u32 + 1);
            for (name, metadata) in &classic.protocols {
                put_compact_nullable(&mut field, Some(name));
                put_uvarint(&mut field, metadata.len() as u32 + 1);
                field.put_slice(metadata);
                put_uvarint(&mut field, 0);
            }
            put_uvarint(&mut field, 0);
            put_uvarint(&mut buf, 1);
            put_uvarint(&mut buf, 0);
            put_uvarint(&mut buf, field.len() as u32);
            buf.put_slice(&field);
        }
    }
    buf.freeze()
}

/// The member record's tagged fields: tag 0 is `ClassicMemberMetadata`, others are skipped.
fn decode_member_tags(r: &mut Reader<'_>) -> Result<Option<StoredClassicMember>, RecordError> {
    let mut classic = None;
    let count = uvarint(r, "tagged field count")?;
    for _ in 0..count {
        let tag = uvarint(r, "tag")?;
        let size = uvarint(r, "tag size")? as usize;
        let field = r.take(size, "tagged field")?;
        if tag == 0 {
            classic = decode_classic(&mut Reader(field))?;
        }
    }
    Ok(classic)
}

fn decode_classic(r: &mut Reader<'_>) -> Result<Option<StoredClassicMember>, RecordError> {
    if r.take(1, "classic member presence")?[0] as i8 == -1 {
        return Ok(None);
    }
    let session_timeout_ms = r.i32("classic session timeout")?;
    let count = compact_len(r, 3, "classic protocols")?;
    let mut protocols = Vec::with_capacity(count);
    for _ in 0..count {
        let name = compact_nullable(r, "classic protocol name")?.unwrap_or_default();
        let len = uvarint(r, "classic protocol metadata")?.saturating_sub(1) as usize;
        let metadata = Bytes::copy_from_slice(r.take(len, "classic protocol metadata")?);
        skip_tagged_fields(r)?;
        protocols.push((name, metadata));
    }
    skip_tagged_fields(r)?;
    Ok(Some(StoredClassicMember {
        session_timeout_ms,
        protocols,
    }))
}

fn decode_member(r: &mut Reader<'_>) -> Result<StoredConsumerMember, RecordError> {
    let instance_id = compact_nullable(r, "instance id")?;
    let rack_id = compact_nullable(r, "rack id")?;
    let client_id = compact_nullable(r, "client id")?.unwrap_or_default();
    let client_host = compact_nullable(r, "client host")?.unwrap_or_default();
    let count = compact_len(r, 1, "subscribed topics")?;
    let mut subscribed_topic_names = Vec::with_capacity(count);
    for _ in 0..count {
        subscribed_topic_names.push(compact_nullable(r, "subscribed topic")?.unwrap_or_default());
    }
    let subscribed_topic_regex = compact_nullable(r, "subscribed regex")?;
    let rebalance_timeout_ms = r.i32("rebalance timeout")?;
    let server_assignor = compact_nullable(r, "server assignor")?;
    let classic = decode_member_tags(r)?;
    Ok(StoredConsumerMember {
        instance_id,
        rack_id,
        client_id,
        client_host,
        subscribed_topic_names,
        subscribed_topic_regex,
        rebalance_timeout_ms,
        server_assignor,
        classic,
    })
}

fn put_compact_nullable(buf: &mut BytesMut, s: Option<&str>) {
    match s {
        None => put_uvarint(buf, 0),
        Some(s) => {
            put_uvarint(buf, s.len() as u32 + 1);
            buf.put_slice(s.as_bytes());
        }
    }
}

fn compact_nullable(r: &mut Reader<'_>, what: &'static str) -> Result<Option<String>, RecordError> {
    let len = uvarint(r, what)?;
    if len == 0 {
        return Ok(None);
    }
    let bytes = r.take(len as usize - 1, what)?;
    std::str::from_utf8(bytes)
        .map(|s| Some(s.to_string()))
        .map_err(|_| RecordError::NotUtf8)
}

/// `[TopicId uuid, Partitions [int32], tagged fields]` as a compact array.
fn put_assignment(buf: &mut BytesMut, a: &Assignment) {
    put_uvarint(buf, a.len() as u32 + 1);
    for (topic, partitions) in a {
        buf.put_slice(topic.as_bytes());
        put_uvarint(buf, partitions.len() as u32 + 1);
        for p in partitions {
            buf.put_i32(*p);
        }
        put_uvarint(buf, 0);
    }
}

fn assignment(r: &mut Reader<'_>) -> Result<Assignment, RecordError> {
    let topics = compact_len(r, 18, "assigned topics")?;
    let mut out = BTreeMap::new();
    for _ in 0..topics {
        let id = Uuid::from_slice(r.take(16, "topic id")?).map_err(|_| RecordError::Truncated("topic id"))?;
        let count = compact_len(r, 4, "partitions")?;
        let mut partitions = BTreeSet::new();
        for _ in 0..count {
            partitions.insert(r.i32("partition")?);
        }
        skip_tagged_fields(r)?;
        out.insert(id, partitions);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::records::{decode, GroupRecord};

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    fn topic() -> Uuid {
        Uuid::from_bytes([1; 16])
    }

    /// The expected bytes are what Kafka 4.4's own generated classes write for the same
    /// records (`MessageUtil.toVersionPrefixedByteBuffer`), so Kafka's tools read ours.
    #[test]
    fn records_are_written_in_kafkas_layout_and_read_back() {
        let cases = [
            (
                ConsumerRecord::GroupEpoch {
                    group_id: "g".into(),
                    epoch: Some(7),
                },
                "0003000167",
                "00000000000700",
            ),
            (
                ConsumerRecord::Member {
                    group_id: "g".into(),
                    member_id: "m".into(),
                    value: Some(StoredConsumerMember {
                        instance_id: None,
                        rack_id: Some("r".into()),
                        client_id: "c".into(),
                        client_host: "/h".into(),
                        subscribed_topic_names: vec!["a".into(), "b".into()],
                        subscribed_topic_regex: None,
                        rebalance_timeout_ms: 300_000,
                        server_assignor: Some("range".into()),
                        classic: None,
                    }),
                },
                "000500016700016d",
                "00000002720263032f68030261026200000493e00672616e676500",
            ),
            (
                // A classic member in a consumer group: Kafka's tagged ClassicMemberMetadata.
                ConsumerRecord::Member {
                    group_id: "g".into(),
                    member_id: "m".into(),
                    value: Some(StoredConsumerMember {
                        instance_id: None,
                        rack_id: Some("r".into()),
                        client_id: "c".into(),
                        client_host: "/h".into(),
                        subscribed_topic_names: vec!["a".into(), "b".into()],
                        subscribed_topic_regex: None,
                        rebalance_timeout_ms: 300_000,
                        server_assignor: None,
                        classic: Some(StoredClassicMember {
                            session_timeout_ms: 45_000,
                            protocols: vec![("range".into(), Bytes::from_static(&[0, 3, 1, 2]))],
                        }),
                    }),
                },
                "000500016700016d",
                "00000002720263032f68030261026200000493e000010013010000afc8020672616e676505000301020000",
            ),
            (
                ConsumerRecord::TargetEpoch {
                    group_id: "g".into(),
                    epoch: Some(7),
                },
                "0006000167",
                "00000000000700",
            ),
            (
                ConsumerRecord::TargetMember {
                    group_id: "g".into(),
                    member_id: "m".into(),
                    value: Some([(topic(), [0, 2].into())].into()),
                },
                "000700016700016d",
                "000002010101010101010101010101010101010300000000000000020000",
            ),
            (
                ConsumerRecord::CurrentAssignment {
                    group_id: "g".into(),
                    member_id: "m".into(),
                    value: Some(StoredMemberAssignment {
                        member_epoch: 7,
                        previous_member_epoch: 6,
                        state: 2,
                        assigned: [(topic(), [0].into())].into(),
                        pending_revocation: [(topic(), [2].into())].into(),
                    }),
                },
                "000800016700016d",
                "00000000000700000006020201010101010101010101010101010101020000000000020101010101010101010101010101010102000000020000",
            ),
        ];
        for (record, key, value) in cases {
            let (k, v) = record.encode();
            assert_eq!(
                (hex(&k), hex(v.as_ref().unwrap())),
                (key.to_string(), value.to_string()),
                "{record:?}"
            );
            assert_eq!(
                decode(Some(&k), v.as_deref()).unwrap(),
                GroupRecord::Consumer(record.clone())
            );
            // Its tombstone reads back as one.
            let tombstone = decode(Some(&k), None).unwrap();
            assert!(matches!(tombstone, GroupRecord::Consumer(ref r) if r.group_id() == "g"));
        }
    }

    #[test]
    fn damaged_values_are_refused_not_panicked_on() {
        let (k, v) = ConsumerRecord::CurrentAssignment {
            group_id: "g".into(),
            member_id: "m".into(),
            value: Some(StoredMemberAssignment {
                member_epoch: 1,
                previous_member_epoch: 0,
                state: 0,
                assigned: [(topic(), [0, 1, 2].into())].into(),
                pending_revocation: Assignment::new(),
            }),
        }
        .encode();
        let v = v.unwrap();
        for cut in 0..v.len() {
            assert!(decode(Some(&k), Some(&v[..cut])).is_err(), "cut at {cut}");
        }
        // A count far beyond the bytes present allocates nothing and fails.
        let mut huge = v[..11].to_vec();
        huge.extend_from_slice(&[0xff, 0xff, 0xff, 0x7f]);
        assert!(decode(Some(&k), Some(&huge)).is_err());
        // A classic member's record (its tagged ClassicMemberMetadata) cut anywhere, or claiming
        // more protocols than its bytes hold, is refused too.
        let (k, v) = ConsumerRecord::Member {
            group_id: "g".into(),
            member_id: "m".into(),
            value: Some(StoredConsumerMember {
                instance_id: None,
                rack_id: None,
                client_id: "c".into(),
                client_host: "h".into(),
                subscribed_topic_names: vec!["a".into()],
                subscribed_topic_regex: None,
                rebalance_timeout_ms: 1,
                server_assignor: None,
                classic: Some(StoredClassicMember {
                    session_timeout_ms: 1,
                    protocols: vec![("range".into(), Bytes::from_static(&[0, 3]))],
                }),
            }),
        }
        .encode();
        let v = v.unwrap();
        for cut in 0..v.len() {
            assert!(
                decode(Some(&k), Some(&v[..cut])).is_err(),
                "classic record cut at {cut}"
            );
        }
        // The protocol count: 12 bytes from the end (then "range", the 2-byte metadata, the
        // protocol's and the struct's tags, the record's).
        let at = v.len() - 12;
        assert_eq!(v[at], 2, "one protocol, as a compact count");
        let mut huge = v.to_vec();
        huge[at] = 0x7f;
        assert!(
            decode(Some(&k), Some(&huge)).is_err(),
            "a protocol count beyond the bytes present"
        );
    }
}
