//! One handler per Kafka API. Each takes a [`RequestContext`] and the decoded request and
//! returns its response, or a future of it when the API waits (a proposal to the quorum, a
//! rebalance). Handlers run their synchronous part in request order on the connection's
//! reader.
//!
//! Each handler authorizes what it is asked through [`Access`] before acting, with Kafka's
//! resource and operation per API (`KafkaApis`) and Kafka's error codes: what the client named
//! is authorized with a logged refusal, listings are filtered silently.

pub mod acls;
pub mod add_offsets_to_txn;
pub mod add_partitions_to_txn;
pub mod alter_client_quotas;
pub mod alter_configs;
pub mod alter_partition_reassignments;
pub mod alter_replica_log_dirs;
pub mod alter_share_group_offsets;
pub mod alter_user_scram_credentials;
pub mod api_versions;
pub mod consumer_group_describe;
pub mod consumer_group_heartbeat;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_groups;
pub mod delete_records;
pub mod delete_share_group_offsets;
pub mod delete_topics;
pub mod describe_client_quotas;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_groups;
pub mod describe_log_dirs;
pub mod describe_producers;
pub mod describe_quorum;
pub mod describe_share_group_offsets;
pub mod describe_topic_partitions;
pub mod describe_transactions;
pub mod describe_user_scram_credentials;
pub mod elect_leaders;
pub mod end_txn;
pub mod fetch;
pub mod find_coordinator;
pub mod heartbeat;
pub mod incremental_alter_configs;
pub mod init_producer_id;
pub mod join_group;
pub mod leave_group;
pub mod list_groups;
pub mod list_offsets;
pub mod list_partition_reassignments;
pub mod list_transactions;
pub mod metadata;
pub mod offset_commit;
pub mod offset_delete;
pub mod offset_fetch;
pub mod offset_for_leader_epoch;
pub mod produce;
pub mod share_acknowledge;
pub mod share_fetch;
pub mod share_group_describe;
pub mod share_group_heartbeat;
pub mod share_group_state;
pub mod sync_group;
#[cfg(test)]
pub(crate) mod testing;
pub mod txn_offset_commit;
pub mod update_features;
pub mod write_txn_markers;

use std::net::SocketAddr;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use kafka_protocol::error::ResponseError;
use kafka_protocol::protocol::StrBytes;
use sluice_protocol::request::Request;
use sluice_protocol::{RequestBody, ResponseBody};

use crate::broker::Broker;
use crate::controller::acls::CLUSTER_NAME;
use crate::metadata::acls::{AclOperation, AclTable, ResourceType};
use crate::metadata::CommitError;
use crate::security::authorizer::{Authorizer, Requester};

/// Who sent a request: the client's address, the listener it connected through (whose
/// advertised addresses Metadata, FindCoordinator and DescribeCluster answer with), and the
/// principal it authenticated as. Cheap to clone into a handler's future.
#[derive(Debug, Clone)]
pub struct Session {
    pub peer: SocketAddr,
    pub listener: Arc<str>,
    /// `User:ANONYMOUS`, `User:<a client certificate's mapped name>`, or `User:<SASL user>`.
    pub principal: Arc<str>,
    /// The client's IP address as text: what an ACL's host is compared with.
    pub host: Arc<str>,
    /// This connection's transactional produces whose appends wait for their coordinator's
    /// verification (KIP-890): while any does, the connection's next produces append after
    /// them, so its batches reach each partition in the order sent.
    pub append_order: Arc<produce::AppendOrder>,
    /// Unique among this process's connections: share sessions (KIP-932) remember the
    /// connection they live on, and its closing releases what their members hold.
    pub connection_id: u64,
}

impl Session {
    pub fn new(peer: SocketAddr, listener: Arc<str>) -> Session {
        static NEXT_CONNECTION_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Session {
            connection_id: NEXT_CONNECTION_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            peer,
            listener,
            principal: Arc::from(crate::security::ANONYMOUS),
            host: Arc::from(peer.ip().to_string()),
            append_order: Arc::default(),
        }
    }

    /// The user client quotas are kept under: the principal's name (`alice` for `User:alice`,
    /// `ANONYMOUS` before authentication), as Kafka names a quota's user entity.
    pub fn quota_user(&self) -> &str {
        self.principal.split_once(':').map_or(&self.principal, |(_, name)| name)
    }

    /// Who is asking, as the authorizer takes it.
    pub fn requester(&self) -> Requester<'_> {
        Requester {
            principal: &self.principal,
            host: &self.host,
        }
    }

    /// What this session may do, judged by `authorizer` against `acls` (the ACLs of the
    /// image the request is answered from).
    pub fn access<'a>(&'a self, authorizer: &'a Authorizer, acls: &'a AclTable) -> Access<'a> {
        Access {
            authorizer,
            acls,
            who: self.requester(),
        }
    }
}

/// One request's view of the authorizer: who asks, against one image's ACLs. `authorize`
/// is for what the client asked for and logs a refusal; `check` filters what a listing shows
/// and computes authorized-operations bits without logging (Kafka's `logIfDenied`). Without an
/// authorizer both allow at once.
#[derive(Clone, Copy)]
pub struct Access<'a> {
    authorizer: &'a Authorizer,
    acls: &'a AclTable,
    who: Requester<'a>,
}

impl<'a> Access<'a> {
    pub fn new(authorizer: &'a Authorizer, acls: &'a AclTable, who: Requester<'a>) -> Access<'a> {
        Access { authorizer, acls, who }
    }

    pub fn is_enabled(&self) -> bool {
        self.authorizer.is_enabled()
    }

    pub fn authorize(&self, operation: AclOperation, resource_type: ResourceType, name: &str) -> bool {
        self.authorizer
            .authorize(self.acls, self.who, operation, resource_type, name)
    }

    pub fn check(&self, operation: AclOperation, resource_type: ResourceType, name: &str) -> bool {
        self.authorizer
            .check(self.acls, self.who, operation, resource_type, name)
    }

    /// `authorize` on the cluster resource.
    pub fn authorize_cluster(&self, operation: AclOperation) -> bool {
        self.authorize(operation, ResourceType::Cluster, CLUSTER_NAME)
    }

    /// `check` on the cluster resource.
    pub fn check_cluster(&self, operation: AclOperation) -> bool {
        self.check(operation, ResourceType::Cluster, CLUSTER_NAME)
    }

    /// Kafka's `authorizeByResourceType`: the operation on at least one resource of the type.
    pub fn check_any(&self, operation: AclOperation, resource_type: ResourceType) -> bool {
        self.authorizer.check_any(self.acls, self.who, operation, resource_type)
    }

    /// KIP-430's authorized-operations bits of a resource.
    pub fn operations(&self, resource_type: ResourceType, name: &str) -> i32 {
        self.authorizer
            .authorized_operations(self.acls, self.who, resource_type, name)
    }

    /// The cluster's authorized-operations bits as Metadata and DescribeCluster answer them
    /// when asked: 0 without DESCRIBE on the cluster (a refusal that is logged), as Kafka.
    pub fn cluster_operations(&self) -> i32 {
        if self.authorize_cluster(AclOperation::Describe) {
            self.operations(ResourceType::Cluster, CLUSTER_NAME)
        } else {
            0
        }
    }

    /// The sentence a refusal's error message carries.
    pub fn denied(&self, operation: AclOperation, resource_type: ResourceType, name: &str) -> String {
        let resource = match resource_type {
            ResourceType::Cluster => "the cluster".to_string(),
            ResourceType::Topic => format!("topic {name:?}"),
            ResourceType::Group => format!("group {name:?}"),
            ResourceType::TransactionalId => format!("transactional id {name:?}"),
            other => format!("{} {name:?}", other.name()),
        };
        format!(
            "Principal {} lacks {} permission on {resource}",
            self.who.principal,
            operation.name()
        )
    }

    /// [`Access::denied`] for the cluster resource.
    pub fn denied_cluster(&self, operation: AclOperation) -> String {
        self.denied(operation, ResourceType::Cluster, CLUSTER_NAME)
    }
}

/// What a handler hands back to the connection.
pub enum Reply {
    /// No response at all (Produce with acks=0, as Kafka does).
    None,
    /// No response, but stop reading from the client for this many ms (an acks=0 Produce past
    /// its quota: Kafka mutes the channel).
    Throttled(i32),
    /// No response, and the connection closes for the reason given (an acks=0 Produce that
    /// failed, as Kafka does).
    Close(String),
    Now(ResponseBody),
    Later(BoxFuture<'static, ResponseBody>),
}

/// Everything a handler knows about the request it answers besides its body: the broker
/// answering it, who sent it, and the version and client id of its header. Every handler
/// takes one: `fn handle(ctx: &RequestContext, request) -> Response` when it answers at once,
/// `async fn handle(ctx: RequestContext, request) -> Response` when it waits (a proposal to the
/// quorum, a group's rebalance), and `-> Reply` for the three that choose (Produce, Fetch,
/// Metadata). Building one costs a few reference-count increments, no copy of the request.
#[derive(Clone)]
pub struct RequestContext {
    pub broker: Arc<Broker>,
    pub session: Session,
    /// The request's API version, from its header.
    pub version: i16,
    client_id: Option<StrBytes>,
}

impl RequestContext {
    pub fn new(broker: Arc<Broker>, session: Session, version: i16, client_id: Option<StrBytes>) -> RequestContext {
        RequestContext {
            broker,
            session,
            version,
            client_id,
        }
    }

    /// The header's `client.id`, empty when the client sent none.
    pub fn client_id(&self) -> &str {
        self.client_id.as_deref().unwrap_or_default()
    }
}

pub fn handle(broker: &Arc<Broker>, request: Request, session: &Session) -> Reply {
    let ctx = RequestContext::new(
        broker.clone(),
        session.clone(),
        request.api_version,
        request.header.client_id,
    );
    // `now!` answers from the handler's return; `later!` hands the connection its future.
    macro_rules! now {
        ($variant:ident, $handler:path, $r:expr) => {
            Reply::Now(ResponseBody::$variant($handler(&ctx, $r)))
        };
    }
    macro_rules! later {
        ($variant:ident, $handler:path, $r:expr) => {
            Reply::Later($handler(ctx, $r).map(ResponseBody::$variant).boxed())
        };
    }
    match request.body {
        RequestBody::Produce(r) => produce::handle(&ctx, r),
        RequestBody::Fetch(r) => fetch::handle(&ctx, r),
        RequestBody::Metadata(r) => metadata::handle(&ctx, r),
        RequestBody::ApiVersions(r) => now!(ApiVersions, api_versions::handle, r),
        RequestBody::ListOffsets(r) => now!(ListOffsets, list_offsets::handle, r),
        RequestBody::OffsetForLeaderEpoch(r) => now!(OffsetForLeaderEpoch, offset_for_leader_epoch::handle, r),
        RequestBody::CreateTopics(r) => later!(CreateTopics, create_topics::handle, r),
        RequestBody::DeleteTopics(r) => later!(DeleteTopics, delete_topics::handle, r),
        RequestBody::CreatePartitions(r) => later!(CreatePartitions, create_partitions::handle, r),
        RequestBody::DescribeConfigs(r) => now!(DescribeConfigs, describe_configs::handle, r),
        RequestBody::AlterConfigs(r) => later!(AlterConfigs, alter_configs::handle, r),
        RequestBody::IncrementalAlterConfigs(r) => {
            later!(IncrementalAlterConfigs, incremental_alter_configs::handle, r)
        }
        RequestBody::AlterPartitionReassignments(r) => {
            later!(AlterPartitionReassignments, alter_partition_reassignments::handle, r)
        }
        RequestBody::ListPartitionReassignments(r) => {
            now!(ListPartitionReassignments, list_partition_reassignments::handle, r)
        }
        RequestBody::InitProducerId(r) => later!(InitProducerId, init_producer_id::handle, r),
        RequestBody::AddPartitionsToTxn(r) => later!(AddPartitionsToTxn, add_partitions_to_txn::handle, r),
        RequestBody::AddOffsetsToTxn(r) => later!(AddOffsetsToTxn, add_offsets_to_txn::handle, r),
        RequestBody::EndTxn(r) => later!(EndTxn, end_txn::handle, r),
        RequestBody::WriteTxnMarkers(r) => later!(WriteTxnMarkers, write_txn_markers::handle, r),
        RequestBody::TxnOffsetCommit(r) => later!(TxnOffsetCommit, txn_offset_commit::handle, r),
        RequestBody::DescribeTransactions(r) => now!(DescribeTransactions, describe_transactions::handle, r),
        RequestBody::ListTransactions(r) => now!(ListTransactions, list_transactions::handle, r),
        RequestBody::FindCoordinator(r) => later!(FindCoordinator, find_coordinator::handle, r),
        RequestBody::JoinGroup(r) => later!(JoinGroup, join_group::handle, r),
        RequestBody::SyncGroup(r) => later!(SyncGroup, sync_group::handle, r),
        RequestBody::Heartbeat(r) => now!(Heartbeat, heartbeat::handle, r),
        RequestBody::LeaveGroup(r) => now!(LeaveGroup, leave_group::handle, r),
        RequestBody::OffsetCommit(r) => later!(OffsetCommit, offset_commit::handle, r),
        RequestBody::OffsetFetch(r) => now!(OffsetFetch, offset_fetch::handle, r),
        RequestBody::OffsetDelete(r) => later!(OffsetDelete, offset_delete::handle, r),
        RequestBody::ListGroups(r) => now!(ListGroups, list_groups::handle, r),
        RequestBody::DescribeGroups(r) => now!(DescribeGroups, describe_groups::handle, r),
        RequestBody::ConsumerGroupHeartbeat(r) => later!(ConsumerGroupHeartbeat, consumer_group_heartbeat::handle, r),
        RequestBody::ConsumerGroupDescribe(r) => now!(ConsumerGroupDescribe, consumer_group_describe::handle, r),
        RequestBody::ShareGroupHeartbeat(r) => now!(ShareGroupHeartbeat, share_group_heartbeat::handle, r),
        RequestBody::ShareGroupDescribe(r) => now!(ShareGroupDescribe, share_group_describe::handle, r),
        RequestBody::ShareFetch(r) => later!(ShareFetch, share_fetch::handle, r),
        RequestBody::ShareAcknowledge(r) => later!(ShareAcknowledge, share_acknowledge::handle, r),
        RequestBody::DescribeShareGroupOffsets(r) => {
            now!(DescribeShareGroupOffsets, describe_share_group_offsets::handle, r)
        }
        RequestBody::DeleteShareGroupOffsets(r) => {
            later!(DeleteShareGroupOffsets, delete_share_group_offsets::handle, r)
        }
        RequestBody::ReadShareGroupState(r) => now!(ReadShareGroupState, share_group_state::handle_read, r),
        RequestBody::WriteShareGroupState(r) => later!(WriteShareGroupState, share_group_state::handle_write, r),
        RequestBody::AlterShareGroupOffsets(r) => later!(AlterShareGroupOffsets, alter_share_group_offsets::handle, r),
        RequestBody::DeleteGroups(r) => later!(DeleteGroups, delete_groups::handle, r),
        RequestBody::DescribeClientQuotas(r) => now!(DescribeClientQuotas, describe_client_quotas::handle, r),
        RequestBody::AlterClientQuotas(r) => later!(AlterClientQuotas, alter_client_quotas::handle, r),
        RequestBody::DescribeUserScramCredentials(r) => {
            now!(DescribeUserScramCredentials, describe_user_scram_credentials::handle, r)
        }
        RequestBody::AlterUserScramCredentials(r) => {
            later!(AlterUserScramCredentials, alter_user_scram_credentials::handle, r)
        }
        RequestBody::DescribeAcls(r) => now!(DescribeAcls, acls::describe, r),
        RequestBody::CreateAcls(r) => later!(CreateAcls, acls::create, r),
        RequestBody::DeleteAcls(r) => later!(DeleteAcls, acls::delete, r),
        RequestBody::DescribeCluster(r) => now!(DescribeCluster, describe_cluster::handle, r),
        RequestBody::DescribeQuorum(r) => now!(DescribeQuorum, describe_quorum::handle, r),
        RequestBody::DeleteRecords(r) => later!(DeleteRecords, delete_records::handle, r),
        RequestBody::ElectLeaders(r) => later!(ElectLeaders, elect_leaders::handle, r),
        RequestBody::UpdateFeatures(r) => later!(UpdateFeatures, update_features::handle, r),
        RequestBody::DescribeProducers(r) => now!(DescribeProducers, describe_producers::handle, r),
        RequestBody::DescribeTopicPartitions(r) => now!(DescribeTopicPartitions, describe_topic_partitions::handle, r),
        RequestBody::AlterReplicaLogDirs(r) => now!(AlterReplicaLogDirs, alter_replica_log_dirs::handle, r),
        RequestBody::DescribeLogDirs(r) => now!(DescribeLogDirs, describe_log_dirs::handle, r),
        // The connection's authenticator answers these; one reaching here arrived where no
        // SASL exchange is possible.
        RequestBody::SaslHandshake(_) => Reply::Now(ResponseBody::SaslHandshake(
            kafka_protocol::messages::SaslHandshakeResponse::default()
                .with_error_code(ResponseError::IllegalSaslState.code()),
        )),
        RequestBody::SaslAuthenticate(_) => Reply::Now(ResponseBody::SaslAuthenticate(
            kafka_protocol::messages::SaslAuthenticateResponse::default()
                .with_error_code(ResponseError::IllegalSaslState.code())
                .with_error_message(Some(str_bytes(
                    "SaslAuthenticate request received outside a SASL exchange",
                ))),
        )),
    }
}

/// A `StrBytes` from any string (response fields).
pub(crate) fn str_bytes(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

/// Kafka error code and message for a failed metadata change. Quorum trouble maps to the
/// retriable errors Kafka clients already handle by refreshing metadata and retrying.
pub(crate) fn commit_error(e: &CommitError) -> (i16, String) {
    use sluice_raft_meta::ProposeError;
    let code = match e {
        CommitError::Refused(api) => return (api.code(), api.message.clone()),
        CommitError::Quorum(ProposeError::NoLeader | ProposeError::LeaderChanged | ProposeError::Stopped) => {
            ResponseError::NotController
        }
        CommitError::Quorum(ProposeError::Timeout(_) | ProposeError::Busy) => ResponseError::RequestTimedOut,
        CommitError::Quorum(ProposeError::TooLarge { .. } | ProposeError::InvalidLearner { .. }) => {
            ResponseError::InvalidRequest
        }
    };
    tracing::warn!(error = %e, "metadata change failed");
    (code.code(), e.to_string())
}
