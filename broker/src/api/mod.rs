//! One handler per Kafka API. Each takes the decoded request and returns its response, or a
//! future of it when the API waits (a long-poll fetch). Handlers run their synchronous part
//! in request order on the connection's reader.
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
pub mod alter_user_scram_credentials;
pub mod api_versions;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_groups;
pub mod delete_records;
pub mod delete_topics;
pub mod describe_client_quotas;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_groups;
pub mod describe_log_dirs;
pub mod describe_producers;
pub mod describe_quorum;
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
pub mod sync_group;
#[cfg(test)]
pub(crate) mod testing;
pub mod txn_offset_commit;
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
    /// This connection's transactional produces whose appends still wait for their
    /// coordinator's verification (KIP-890): while any does, the connection's next produces
    /// wait behind them, so its batches reach each partition in the order sent.
    pub deferred_produces: Arc<std::sync::atomic::AtomicUsize>,
}

impl Session {
    pub fn new(peer: SocketAddr, listener: Arc<str>) -> Session {
        Session {
            peer,
            listener,
            principal: Arc::from(crate::security::ANONYMOUS),
            host: Arc::from(peer.ip().to_string()),
            deferred_produces: Arc::default(),
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

pub fn handle(broker: &Arc<Broker>, request: Request, session: &Session) -> Reply {
    let version = request.api_version;
    let now = |body| Reply::Now(body);
    let b = broker.clone();
    let client_id = request.header.client_id.as_deref().unwrap_or_default();
    match request.body {
        RequestBody::Produce(r) => produce::handle(broker, r, version, client_id, session),
        RequestBody::Fetch(r) => fetch::handle(broker, r, version, client_id, session),
        RequestBody::ListOffsets(r) => now(ResponseBody::ListOffsets(list_offsets::handle(
            broker, r, version, session,
        ))),
        RequestBody::Metadata(r) => metadata::handle(broker, r, version, session),
        RequestBody::ApiVersions(_) => now(ResponseBody::ApiVersions(api_versions::handle(
            broker.config.txn.transaction_version,
        ))),
        RequestBody::CreateTopics(r) => {
            later(create_topics::handle(b, session.clone(), r).map(ResponseBody::CreateTopics))
        }
        RequestBody::DeleteTopics(r) => {
            later(delete_topics::handle(b, session.clone(), r, version).map(ResponseBody::DeleteTopics))
        }
        RequestBody::DescribeConfigs(r) => now(ResponseBody::DescribeConfigs(describe_configs::handle(
            broker, r, version, session,
        ))),
        RequestBody::CreatePartitions(r) => {
            later(create_partitions::handle(b, session.clone(), r).map(ResponseBody::CreatePartitions))
        }
        RequestBody::AlterConfigs(r) => {
            later(alter_configs::handle(b, session.clone(), r).map(ResponseBody::AlterConfigs))
        }
        RequestBody::IncrementalAlterConfigs(r) => {
            later(incremental_alter_configs::handle(b, session.clone(), r).map(ResponseBody::IncrementalAlterConfigs))
        }
        RequestBody::AlterPartitionReassignments(r) => later(
            alter_partition_reassignments::handle(b, session.clone(), r).map(ResponseBody::AlterPartitionReassignments),
        ),
        RequestBody::ListPartitionReassignments(r) => now(ResponseBody::ListPartitionReassignments(
            list_partition_reassignments::handle(broker, r, session),
        )),
        RequestBody::OffsetForLeaderEpoch(r) => now(ResponseBody::OffsetForLeaderEpoch(
            offset_for_leader_epoch::handle(broker, r, session),
        )),
        RequestBody::InitProducerId(r) => {
            later(init_producer_id::handle(b, session.clone(), r, version).map(ResponseBody::InitProducerId))
        }
        RequestBody::AddPartitionsToTxn(r) => {
            later(add_partitions_to_txn::handle(b, session.clone(), r, version).map(ResponseBody::AddPartitionsToTxn))
        }
        RequestBody::AddOffsetsToTxn(r) => {
            later(add_offsets_to_txn::handle(b, session.clone(), r, version).map(ResponseBody::AddOffsetsToTxn))
        }
        RequestBody::EndTxn(r) => later(end_txn::handle(b, session.clone(), r, version).map(ResponseBody::EndTxn)),
        RequestBody::WriteTxnMarkers(r) => {
            later(write_txn_markers::handle(b, session.clone(), r).map(ResponseBody::WriteTxnMarkers))
        }
        RequestBody::DescribeTransactions(r) => now(ResponseBody::DescribeTransactions(describe_transactions::handle(
            broker, session, r,
        ))),
        RequestBody::ListTransactions(r) => now(ResponseBody::ListTransactions(list_transactions::handle(
            broker, session, r,
        ))),
        RequestBody::FindCoordinator(r) => {
            later(find_coordinator::handle(b, session.clone(), r, version).map(ResponseBody::FindCoordinator))
        }
        RequestBody::JoinGroup(r) => later(
            join_group::handle(b, session.clone(), r, version, client_id.to_string()).map(ResponseBody::JoinGroup),
        ),
        RequestBody::SyncGroup(r) => later(sync_group::handle(b, session.clone(), r).map(ResponseBody::SyncGroup)),
        RequestBody::Heartbeat(r) => now(ResponseBody::Heartbeat(heartbeat::handle(broker, r, session))),
        RequestBody::LeaveGroup(r) => now(ResponseBody::LeaveGroup(leave_group::handle(
            broker, r, version, session,
        ))),
        RequestBody::OffsetCommit(r) => {
            later(offset_commit::handle(b, session.clone(), r).map(ResponseBody::OffsetCommit))
        }
        RequestBody::TxnOffsetCommit(r) => {
            later(txn_offset_commit::handle(b, session.clone(), r, version).map(ResponseBody::TxnOffsetCommit))
        }
        RequestBody::OffsetFetch(r) => now(ResponseBody::OffsetFetch(offset_fetch::handle(
            broker, r, version, session,
        ))),
        RequestBody::ListGroups(r) => now(ResponseBody::ListGroups(list_groups::handle(broker, r, session))),
        RequestBody::DescribeGroups(r) => now(ResponseBody::DescribeGroups(describe_groups::handle(
            broker, r, version, session,
        ))),
        RequestBody::DeleteGroups(r) => {
            later(delete_groups::handle(b, session.clone(), r).map(ResponseBody::DeleteGroups))
        }
        RequestBody::OffsetDelete(r) => {
            later(offset_delete::handle(b, session.clone(), r).map(ResponseBody::OffsetDelete))
        }
        RequestBody::DescribeClientQuotas(r) => now(ResponseBody::DescribeClientQuotas(
            describe_client_quotas::handle(broker, r, session),
        )),
        RequestBody::DescribeUserScramCredentials(r) => now(ResponseBody::DescribeUserScramCredentials(
            describe_user_scram_credentials::handle(broker, session, r),
        )),
        RequestBody::AlterUserScramCredentials(r) => later(
            alter_user_scram_credentials::handle(b, session.clone(), r).map(ResponseBody::AlterUserScramCredentials),
        ),
        RequestBody::AlterClientQuotas(r) => {
            later(alter_client_quotas::handle(b, session.clone(), r).map(ResponseBody::AlterClientQuotas))
        }
        RequestBody::DescribeCluster(r) => now(ResponseBody::DescribeCluster(describe_cluster::handle(
            broker, r, session,
        ))),
        RequestBody::DeleteRecords(r) => {
            later(delete_records::handle(b, session.clone(), r).map(ResponseBody::DeleteRecords))
        }
        RequestBody::DescribeAcls(r) => now(ResponseBody::DescribeAcls(acls::describe(broker, session, r, version))),
        RequestBody::CreateAcls(r) => later(acls::create(b, session.clone(), r, version).map(ResponseBody::CreateAcls)),
        RequestBody::DeleteAcls(r) => later(acls::delete(b, session.clone(), r, version).map(ResponseBody::DeleteAcls)),
        // The connection's authenticator answers these; one reaching here arrived where no
        // SASL exchange is possible.
        RequestBody::SaslHandshake(_) => now(ResponseBody::SaslHandshake(
            kafka_protocol::messages::SaslHandshakeResponse::default()
                .with_error_code(ResponseError::IllegalSaslState.code()),
        )),
        RequestBody::SaslAuthenticate(_) => now(ResponseBody::SaslAuthenticate(
            kafka_protocol::messages::SaslAuthenticateResponse::default()
                .with_error_code(ResponseError::IllegalSaslState.code())
                .with_error_message(Some(str_bytes(
                    "SaslAuthenticate request received outside a SASL exchange",
                ))),
        )),
        RequestBody::AlterReplicaLogDirs(r) => now(ResponseBody::AlterReplicaLogDirs(alter_replica_log_dirs::handle(
            broker, r, session,
        ))),
        RequestBody::DescribeLogDirs(r) => now(ResponseBody::DescribeLogDirs(describe_log_dirs::handle(
            broker, r, session,
        ))),
        RequestBody::ElectLeaders(r) => {
            later(elect_leaders::handle(b, session.clone(), r, version).map(ResponseBody::ElectLeaders))
        }
        RequestBody::DescribeProducers(r) => now(ResponseBody::DescribeProducers(describe_producers::handle(
            broker, r, session,
        ))),
        RequestBody::DescribeTopicPartitions(r) => now(ResponseBody::DescribeTopicPartitions(
            describe_topic_partitions::handle(broker, r, session),
        )),
        RequestBody::DescribeQuorum(r) => now(ResponseBody::DescribeQuorum(describe_quorum::handle(
            broker, r, version, session,
        ))),
    }
}

fn later(future: impl std::future::Future<Output = ResponseBody> + Send + 'static) -> Reply {
    Reply::Later(future.boxed())
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
