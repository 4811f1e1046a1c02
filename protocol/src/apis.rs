//! The single list of APIs Sluice implements. One macro row per API generates the request
//! and response enums, their decode/encode dispatch and the advertised version table, so an
//! API cannot be advertised without a decoder, or decoded without a response type.
//!
//! (The `kafka-protocol` crate's own `RequestKind` covers every API and sits behind a
//! feature that doubles release build time; this list covers what we serve.)

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable};

macro_rules! implemented_apis {
    ($($variant:ident: $req:ty => $resp:ty;)*) => {
        /// A decoded request body of an API this broker implements.
        #[derive(Debug)]
        pub enum RequestBody { $($variant($req),)* }

        /// A response body, one variant per implemented API.
        #[derive(Debug)]
        pub enum ResponseBody { $($variant($resp),)* }

        /// APIs this broker implements, in API-key order.
        pub(crate) const IMPLEMENTED: &[ApiKey] = &[$(ApiKey::$variant,)*];

        impl RequestBody {
            pub(crate) fn decode(key: ApiKey, buf: &mut Bytes, version: i16) -> anyhow::Result<Option<Self>> {
                Ok(match key {
                    $(ApiKey::$variant => Some(RequestBody::$variant(<$req>::decode(buf, version)?)),)*
                    _ => None,
                })
            }
        }

        impl ResponseBody {
            pub(crate) fn encode(&self, buf: &mut BytesMut, version: i16) -> anyhow::Result<()> {
                match self { $(ResponseBody::$variant(body) => body.encode(buf, version),)* }
            }

            /// The API this response answers.
            pub fn api_key(&self) -> ApiKey {
                match self { $(ResponseBody::$variant(_) => ApiKey::$variant,)* }
            }
        }
    };
}

implemented_apis! {
    Produce: ProduceRequest => ProduceResponse;
    Fetch: FetchRequest => FetchResponse;
    ListOffsets: ListOffsetsRequest => ListOffsetsResponse;
    Metadata: MetadataRequest => MetadataResponse;
    OffsetCommit: OffsetCommitRequest => OffsetCommitResponse;
    OffsetFetch: OffsetFetchRequest => OffsetFetchResponse;
    FindCoordinator: FindCoordinatorRequest => FindCoordinatorResponse;
    JoinGroup: JoinGroupRequest => JoinGroupResponse;
    Heartbeat: HeartbeatRequest => HeartbeatResponse;
    LeaveGroup: LeaveGroupRequest => LeaveGroupResponse;
    SyncGroup: SyncGroupRequest => SyncGroupResponse;
    DescribeGroups: DescribeGroupsRequest => DescribeGroupsResponse;
    ListGroups: ListGroupsRequest => ListGroupsResponse;
    ApiVersions: ApiVersionsRequest => ApiVersionsResponse;
    CreateTopics: CreateTopicsRequest => CreateTopicsResponse;
    DeleteTopics: DeleteTopicsRequest => DeleteTopicsResponse;
    InitProducerId: InitProducerIdRequest => InitProducerIdResponse;
    OffsetForLeaderEpoch: OffsetForLeaderEpochRequest => OffsetForLeaderEpochResponse;
    DescribeConfigs: DescribeConfigsRequest => DescribeConfigsResponse;
    CreatePartitions: CreatePartitionsRequest => CreatePartitionsResponse;
    DeleteGroups: DeleteGroupsRequest => DeleteGroupsResponse;
    IncrementalAlterConfigs: IncrementalAlterConfigsRequest => IncrementalAlterConfigsResponse;
    OffsetDelete: OffsetDeleteRequest => OffsetDeleteResponse;
    DescribeQuorum: DescribeQuorumRequest => DescribeQuorumResponse;
    DescribeCluster: DescribeClusterRequest => DescribeClusterResponse;
}
