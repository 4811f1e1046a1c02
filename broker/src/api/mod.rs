//! One handler per Kafka API. Each takes the decoded request and returns its response, or a
//! future of it when the API waits (a long-poll fetch). Handlers run their synchronous part
//! in request order on the connection's reader.

pub mod acls;
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
pub mod describe_user_scram_credentials;
pub mod elect_leaders;
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
pub mod metadata;
pub mod offset_commit;
pub mod offset_delete;
pub mod offset_fetch;
pub mod offset_for_leader_epoch;
pub mod produce;
pub mod sync_group;

use std::net::SocketAddr;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use kafka_protocol::error::ResponseError;
use kafka_protocol::protocol::StrBytes;
use sluice_protocol::request::Request;
use sluice_protocol::{RequestBody, ResponseBody};

use crate::broker::Broker;
use crate::metadata::CommitError;

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
}

impl Session {
    pub fn new(peer: SocketAddr, listener: Arc<str>) -> Session {
        Session {
            peer,
            listener,
            principal: Arc::from(crate::security::ANONYMOUS),
            host: Arc::from(peer.ip().to_string()),
        }
    }

    /// Who is asking, as the authorizer takes it.
    pub fn requester(&self) -> crate::security::authorizer::Requester<'_> {
        crate::security::authorizer::Requester {
            principal: &self.principal,
            host: &self.host,
        }
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
        RequestBody::Produce(r) => produce::handle(broker, r, version, client_id),
        RequestBody::Fetch(r) => fetch::handle(broker, r, version, client_id),
        RequestBody::ListOffsets(r) => now(ResponseBody::ListOffsets(list_offsets::handle(broker, r, version))),
        RequestBody::Metadata(r) => metadata::handle(broker, r, version, &session.listener),
        RequestBody::ApiVersions(_) => now(ResponseBody::ApiVersions(api_versions::handle())),
        RequestBody::CreateTopics(r) => later(create_topics::handle(b, r).map(ResponseBody::CreateTopics)),
        RequestBody::DeleteTopics(r) => later(delete_topics::handle(b, r, version).map(ResponseBody::DeleteTopics)),
        RequestBody::DescribeConfigs(r) => now(ResponseBody::DescribeConfigs(describe_configs::handle(
            broker, r, version,
        ))),
        RequestBody::CreatePartitions(r) => later(create_partitions::handle(b, r).map(ResponseBody::CreatePartitions)),
        RequestBody::AlterConfigs(r) => later(alter_configs::handle(b, r).map(ResponseBody::AlterConfigs)),
        RequestBody::IncrementalAlterConfigs(r) => {
            later(incremental_alter_configs::handle(b, r).map(ResponseBody::IncrementalAlterConfigs))
        }
        RequestBody::AlterPartitionReassignments(r) => {
            later(alter_partition_reassignments::handle(b, r).map(ResponseBody::AlterPartitionReassignments))
        }
        RequestBody::ListPartitionReassignments(r) => now(ResponseBody::ListPartitionReassignments(
            list_partition_reassignments::handle(broker, r),
        )),
        RequestBody::OffsetForLeaderEpoch(r) => now(ResponseBody::OffsetForLeaderEpoch(
            offset_for_leader_epoch::handle(broker, r),
        )),
        RequestBody::InitProducerId(r) => later(init_producer_id::handle(b, r).map(ResponseBody::InitProducerId)),
        RequestBody::FindCoordinator(r) => {
            later(find_coordinator::handle(b, r, version, session.listener.clone()).map(ResponseBody::FindCoordinator))
        }
        RequestBody::JoinGroup(r) => {
            later(join_group::handle(b, r, version, client_id.to_string(), session.peer).map(ResponseBody::JoinGroup))
        }
        RequestBody::SyncGroup(r) => later(sync_group::handle(b, r).map(ResponseBody::SyncGroup)),
        RequestBody::Heartbeat(r) => now(ResponseBody::Heartbeat(heartbeat::handle(broker, r))),
        RequestBody::LeaveGroup(r) => now(ResponseBody::LeaveGroup(leave_group::handle(broker, r, version))),
        RequestBody::OffsetCommit(r) => later(offset_commit::handle(b, r).map(ResponseBody::OffsetCommit)),
        RequestBody::OffsetFetch(r) => now(ResponseBody::OffsetFetch(offset_fetch::handle(broker, r, version))),
        RequestBody::ListGroups(r) => now(ResponseBody::ListGroups(list_groups::handle(broker, r))),
        RequestBody::DescribeGroups(r) => now(ResponseBody::DescribeGroups(describe_groups::handle(
            broker, r, version,
        ))),
        RequestBody::DeleteGroups(r) => later(delete_groups::handle(b, r).map(ResponseBody::DeleteGroups)),
        RequestBody::OffsetDelete(r) => later(offset_delete::handle(b, r).map(ResponseBody::OffsetDelete)),
        RequestBody::DescribeClientQuotas(r) => now(ResponseBody::DescribeClientQuotas(
            describe_client_quotas::handle(broker, r),
        )),
        RequestBody::DescribeUserScramCredentials(r) => now(ResponseBody::DescribeUserScramCredentials(
            describe_user_scram_credentials::handle(broker, session, r),
        )),
        RequestBody::AlterUserScramCredentials(r) => later(
            alter_user_scram_credentials::handle(b, session.clone(), r).map(ResponseBody::AlterUserScramCredentials),
        ),
        RequestBody::AlterClientQuotas(r) => {
            later(alter_client_quotas::handle(b, r).map(ResponseBody::AlterClientQuotas))
        }
        RequestBody::DescribeCluster(r) => now(ResponseBody::DescribeCluster(describe_cluster::handle(
            broker,
            r,
            &session.listener,
        ))),
        RequestBody::DeleteRecords(r) => later(delete_records::handle(b, r).map(ResponseBody::DeleteRecords)),
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
                .with_error_message(Some(str_bytes("SaslAuthenticate request received outside a SASL exchange"))),
        )),
        RequestBody::AlterReplicaLogDirs(r) => now(ResponseBody::AlterReplicaLogDirs(alter_replica_log_dirs::handle(
            broker, r,
        ))),
        RequestBody::DescribeLogDirs(r) => now(ResponseBody::DescribeLogDirs(describe_log_dirs::handle(broker, r))),
        RequestBody::ElectLeaders(r) => later(elect_leaders::handle(b, r, version).map(ResponseBody::ElectLeaders)),
        RequestBody::DescribeProducers(r) => {
            now(ResponseBody::DescribeProducers(describe_producers::handle(broker, r)))
        }
        RequestBody::DescribeTopicPartitions(r) => now(ResponseBody::DescribeTopicPartitions(
            describe_topic_partitions::handle(broker, r, &session.listener),
        )),
        RequestBody::DescribeQuorum(r) => now(ResponseBody::DescribeQuorum(describe_quorum::handle(
            broker, r, version,
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
        CommitError::Quorum(ProposeError::NoLeader | ProposeError::Stopped) => ResponseError::NotController,
        CommitError::Quorum(ProposeError::Timeout(_) | ProposeError::Busy) => ResponseError::RequestTimedOut,
        CommitError::Quorum(ProposeError::TooLarge { .. } | ProposeError::InvalidLearner { .. }) => {
            ResponseError::InvalidRequest
        }
    };
    tracing::warn!(error = %e, "metadata change failed");
    (code.code(), e.to_string())
}
