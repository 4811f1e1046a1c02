// Sluice: replaces what protobuf-build generated for raft-proto 0.7.0 in its `prost-codec` mode
// (`wrapper_eraftpb.rs` plus an `impl ::protobuf::Message` for each message), without the
// `protobuf` crate. raft-rs is written against rust-protobuf's API: `get_x`/`set_x`/`mut_x`/
// `take_x`/`clear_x`/`has_x` accessors and `protobuf::Message`'s byte codec. These are the same
// accessors as plain inherent methods, and `PbMessage` is that codec over `prost::Message`, so
// raft-rs's call sites change only in what they import.

use std::sync::OnceLock;

use prost::bytes::Bytes;

use crate::eraftpb::*;

/// The part of rust-protobuf's `Message` trait that raft-rs calls, for every prost message.
pub trait PbMessage: prost::Message + Default + Sized {
    /// The encoded size in bytes (saturating; raft-rs only compares it with size limits).
    fn compute_size(&self) -> u32 {
        u32::try_from(self.encoded_len()).unwrap_or(u32::MAX)
    }

    /// Encodes the message into a new buffer of exactly its encoded size.
    fn write_to_bytes(&self) -> Result<Vec<u8>, prost::EncodeError> {
        let mut buf = Vec::with_capacity(self.encoded_len());
        self.encode(&mut buf)?;
        Ok(buf)
    }

    /// Merges the fields encoded in `bytes` into `self`.
    fn merge_from_bytes(&mut self, bytes: &[u8]) -> Result<(), prost::DecodeError> {
        self.merge(bytes)
    }

    /// Decodes a message from `bytes`.
    fn parse_from_bytes(bytes: &[u8]) -> Result<Self, prost::DecodeError> {
        Self::decode(bytes)
    }
}

impl<M: prost::Message + Default> PbMessage for M {}

/// Accessors of one message, by field kind, as protobuf-build's wrapper generated them. Each
/// field names its methods (`macro_rules!` cannot build `get_` + field). Enum getters use prost's
/// own (an unknown value reads as the enum's default, as rust-protobuf decoded it) rather than the
/// wrapper's, which panicked on a value it did not know.
macro_rules! accessors {
    ($msg:ident { $($kind:ident $field:ident $(: $ty:ty)? [$($method:ident)*]),* $(,)? }) => {
        impl $msg {
            /// A new message with every field at its default.
            pub fn new_() -> $msg {
                ::std::default::Default::default()
            }

            /// A shared message with every field at its default.
            pub fn default_ref() -> &'static Self {
                static INSTANCE: OnceLock<$msg> = OnceLock::new();
                INSTANCE.get_or_init(<$msg>::default)
            }

            $(accessors!(@$kind $field $(: $ty)? [$($method)*]);)*
        }
    };
    (@scalar $field:ident: $ty:ty [$clear:ident $set:ident $get:ident]) => {
        #[inline] pub fn $clear(&mut self) { self.$field = <$ty>::default(); }
        #[inline] pub fn $set(&mut self, v: $ty) { self.$field = v; }
        #[inline] pub fn $get(&self) -> $ty { self.$field }
    };
    // prost generates `set_x(Enum)` and `x() -> Enum` itself.
    (@enumeration $field:ident: $ty:ty [$clear:ident $get:ident]) => {
        #[inline] pub fn $clear(&mut self) { self.$field = 0; }
        #[inline] pub fn $get(&self) -> $ty { self.$field() }
    };
    (@bytes $field:ident [$clear:ident $set:ident $get:ident $mut:ident $take:ident]) => {
        #[inline] pub fn $clear(&mut self) { self.$field.clear(); }
        #[inline] pub fn $set(&mut self, v: Bytes) { self.$field = v; }
        #[inline] pub fn $get(&self) -> &[u8] { &self.$field }
        #[inline] pub fn $mut(&mut self) -> &mut Bytes { &mut self.$field }
        #[inline] pub fn $take(&mut self) -> Bytes { ::std::mem::take(&mut self.$field) }
    };
    (@repeated $field:ident: $ty:ty [$clear:ident $set:ident $get:ident $mut:ident $take:ident]) => {
        #[inline] pub fn $clear(&mut self) { self.$field.clear(); }
        #[inline] pub fn $set(&mut self, v: Vec<$ty>) { self.$field = v; }
        #[inline] pub fn $get(&self) -> &[$ty] { &self.$field }
        #[inline] pub fn $mut(&mut self) -> &mut Vec<$ty> { &mut self.$field }
        #[inline] pub fn $take(&mut self) -> Vec<$ty> { ::std::mem::take(&mut self.$field) }
    };
    (@message $field:ident: $ty:ty [$has:ident $clear:ident $set:ident $get:ident $mut:ident $take:ident]) => {
        #[inline] pub fn $has(&self) -> bool { self.$field.is_some() }
        #[inline] pub fn $clear(&mut self) { self.$field = None; }
        #[inline] pub fn $set(&mut self, v: $ty) { self.$field = Some(v); }
        #[inline] pub fn $get(&self) -> &$ty { self.$field.as_ref().unwrap_or_else(|| <$ty>::default_ref()) }
        #[inline] pub fn $mut(&mut self) -> &mut $ty { self.$field.get_or_insert_with(<$ty>::default) }
        #[inline] pub fn $take(&mut self) -> $ty { self.$field.take().unwrap_or_default() }
    };
}

accessors!(Entry {
    enumeration entry_type: EntryType [clear_entry_type get_entry_type],
    scalar term: u64 [clear_term set_term get_term],
    scalar index: u64 [clear_index set_index get_index],
    bytes data [clear_data set_data get_data mut_data take_data],
    bytes context [clear_context set_context get_context mut_context take_context],
    scalar sync_log: bool [clear_sync_log set_sync_log get_sync_log],
});

accessors!(SnapshotMetadata {
    message conf_state: ConfState [has_conf_state clear_conf_state set_conf_state get_conf_state mut_conf_state take_conf_state],
    scalar index: u64 [clear_index set_index get_index],
    scalar term: u64 [clear_term set_term get_term],
});

accessors!(Snapshot {
    bytes data [clear_data set_data get_data mut_data take_data],
    message metadata: SnapshotMetadata [has_metadata clear_metadata set_metadata get_metadata mut_metadata take_metadata],
});

accessors!(Message {
    enumeration msg_type: MessageType [clear_msg_type get_msg_type],
    scalar to: u64 [clear_to set_to get_to],
    scalar from: u64 [clear_from set_from get_from],
    scalar term: u64 [clear_term set_term get_term],
    scalar log_term: u64 [clear_log_term set_log_term get_log_term],
    scalar index: u64 [clear_index set_index get_index],
    repeated entries: Entry [clear_entries set_entries get_entries mut_entries take_entries],
    scalar commit: u64 [clear_commit set_commit get_commit],
    scalar commit_term: u64 [clear_commit_term set_commit_term get_commit_term],
    message snapshot: Snapshot [has_snapshot clear_snapshot set_snapshot get_snapshot mut_snapshot take_snapshot],
    scalar request_snapshot: u64 [clear_request_snapshot set_request_snapshot get_request_snapshot],
    scalar reject: bool [clear_reject set_reject get_reject],
    scalar reject_hint: u64 [clear_reject_hint set_reject_hint get_reject_hint],
    bytes context [clear_context set_context get_context mut_context take_context],
    scalar deprecated_priority: u64 [clear_deprecated_priority set_deprecated_priority get_deprecated_priority],
    scalar priority: i64 [clear_priority set_priority get_priority],
});

accessors!(HardState {
    scalar term: u64 [clear_term set_term get_term],
    scalar vote: u64 [clear_vote set_vote get_vote],
    scalar commit: u64 [clear_commit set_commit get_commit],
});

accessors!(ConfState {
    repeated voters: u64 [clear_voters set_voters get_voters mut_voters take_voters],
    repeated learners: u64 [clear_learners set_learners get_learners mut_learners take_learners],
    repeated voters_outgoing: u64 [clear_voters_outgoing set_voters_outgoing get_voters_outgoing mut_voters_outgoing take_voters_outgoing],
    repeated learners_next: u64 [clear_learners_next set_learners_next get_learners_next mut_learners_next take_learners_next],
    scalar auto_leave: bool [clear_auto_leave set_auto_leave get_auto_leave],
});

accessors!(ConfChange {
    enumeration change_type: ConfChangeType [clear_change_type get_change_type],
    scalar node_id: u64 [clear_node_id set_node_id get_node_id],
    bytes context [clear_context set_context get_context mut_context take_context],
    scalar id: u64 [clear_id set_id get_id],
});

accessors!(ConfChangeSingle {
    enumeration change_type: ConfChangeType [clear_change_type get_change_type],
    scalar node_id: u64 [clear_node_id set_node_id get_node_id],
});

accessors!(ConfChangeV2 {
    enumeration transition: ConfChangeTransition [clear_transition get_transition],
    repeated changes: ConfChangeSingle [clear_changes set_changes get_changes mut_changes take_changes],
    bytes context [clear_context set_context get_context mut_context take_context],
});

/// `values()` of each enum, as protobuf-build's wrapper generated it.
macro_rules! enum_values {
    ($($enum:ident [$($variant:ident)*]),* $(,)?) => {$(
        impl $enum {
            /// Every variant, in declaration order.
            pub fn values() -> &'static [Self] {
                &[$($enum::$variant),*]
            }
        }
    )*};
}

enum_values!(
    EntryType [EntryNormal EntryConfChange EntryConfChangeV2],
    MessageType [
        MsgHup MsgBeat MsgPropose MsgAppend MsgAppendResponse MsgRequestVote MsgRequestVoteResponse
        MsgSnapshot MsgHeartbeat MsgHeartbeatResponse MsgUnreachable MsgSnapStatus MsgCheckQuorum
        MsgTransferLeader MsgTimeoutNow MsgReadIndex MsgReadIndexResp MsgRequestPreVote
        MsgRequestPreVoteResponse
    ],
    ConfChangeTransition [Auto Implicit Explicit],
    ConfChangeType [AddNode RemoveNode AddLearnerNode],
);
