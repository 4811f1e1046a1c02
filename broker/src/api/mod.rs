//! One handler per Kafka API. Each takes the decoded request and returns its response, or a
//! future of it when the API waits (a long-poll fetch). Handlers run their synchronous part
//! in request order on the connection's reader.

pub mod api_versions;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_topics;
pub mod describe_cluster;
pub mod describe_configs;
pub mod fetch;
pub mod incremental_alter_configs;
pub mod list_offsets;
pub mod metadata;
pub mod produce;

use std::sync::Arc;

use futures::future::BoxFuture;
use kafka_protocol::error::ResponseError;
use kafka_protocol::protocol::StrBytes;
use sluice_protocol::request::Request;
use sluice_protocol::{RequestBody, ResponseBody};

use crate::broker::Broker;
use crate::metadata::CommitError;

/// What a handler hands back to the connection.
pub enum Reply {
    /// No response at all (Produce with acks=0, as Kafka does).
    None,
    Now(ResponseBody),
    Later(BoxFuture<'static, ResponseBody>),
}

pub fn handle(broker: &Arc<Broker>, request: Request) -> Reply {
    let version = request.api_version;
    let now = |body| Reply::Now(body);
    match request.body {
        RequestBody::Produce(r) => produce::handle(broker, r, version),
        RequestBody::Fetch(r) => fetch::handle(broker, r, version),
        RequestBody::ListOffsets(r) => now(ResponseBody::ListOffsets(list_offsets::handle(broker, r, version))),
        RequestBody::Metadata(r) => now(ResponseBody::Metadata(metadata::handle(broker, r, version))),
        RequestBody::ApiVersions(_) => now(ResponseBody::ApiVersions(api_versions::handle())),
        RequestBody::CreateTopics(r) => now(ResponseBody::CreateTopics(create_topics::handle(broker, r, version))),
        RequestBody::DeleteTopics(r) => now(ResponseBody::DeleteTopics(delete_topics::handle(broker, r, version))),
        RequestBody::DescribeConfigs(r) => now(ResponseBody::DescribeConfigs(describe_configs::handle(broker, r, version))),
        RequestBody::CreatePartitions(r) => now(ResponseBody::CreatePartitions(create_partitions::handle(broker, r))),
        RequestBody::IncrementalAlterConfigs(r) => {
            now(ResponseBody::IncrementalAlterConfigs(incremental_alter_configs::handle(broker, r)))
        }
        RequestBody::DescribeCluster(r) => now(ResponseBody::DescribeCluster(describe_cluster::handle(broker, r))),
    }
}

/// A `StrBytes` from any string (response fields).
pub(crate) fn str_bytes(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

/// Kafka error code and message for a failed metadata change.
pub(crate) fn commit_error(e: &CommitError) -> (i16, String) {
    match e {
        CommitError::Refused(api) => (api.code(), api.message.clone()),
        CommitError::Storage(_) => {
            tracing::error!(error = %e, "metadata change failed");
            (ResponseError::KafkaStorageError.code(), e.to_string())
        }
    }
}
