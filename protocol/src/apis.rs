//! The single list of APIs Sluice implements. One macro row per API generates the request
//! and response enums, their decode/encode dispatch and the advertised version table, so an
//! API cannot be advertised without a decoder, or decoded without a response type.
//!
//! An API's range is the intersection of what Kafka 4.1 defines for it
//! (`ApiKey::valid_versions`) and what the crate's request and response types can decode and
//! encode (`Message::VERSIONS`): the crate lags the schemas in places (OffsetCommit and
//! OffsetFetch v10, InitProducerId v6), and a client told we speak a version we cannot decode
//! has its connection closed.
//!
//! (The `kafka-protocol` crate's own `RequestKind` covers every API and sits behind a
//! feature that doubles release build time; this list covers what we serve.)

use bytes::Bytes;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, Message, VersionRange};

macro_rules! implemented_apis {
    ($($variant:ident: $req:ty => $resp:ty;)*) => {
        /// A decoded request body of an API this broker implements.
        #[derive(Debug)]
        pub enum RequestBody { $($variant($req),)* }

        /// A response body, one variant per implemented API.
        #[derive(Debug)]
        pub enum ResponseBody { $($variant($resp),)* }

        /// The versions of `key` this broker decodes and answers, or `None` when the API is
        /// not implemented.
        pub(crate) fn implemented_versions(key: ApiKey) -> Option<VersionRange> {
            match key {
                $(ApiKey::$variant => Some(
                    key.valid_versions()
                        .intersect(&<$req as Message>::VERSIONS)
                        .intersect(&<$resp as Message>::VERSIONS),
                ),)*
                _ => None,
            }
        }

        /// A default response of an implemented API (the version-table test encodes one at
        /// every advertised version).
        #[cfg(test)]
        pub(crate) fn default_response(key: ApiKey) -> Option<ResponseBody> {
            match key {
                $(ApiKey::$variant => Some(ResponseBody::$variant(<$resp>::default())),)*
                _ => None,
            }
        }

        /// A default request of an implemented API, encoded at `version` (the version-table
        /// test decodes one at every advertised version).
        #[cfg(test)]
        pub(crate) fn encode_default_request(key: ApiKey, buf: &mut bytes::BytesMut, version: i16) -> Option<anyhow::Result<()>> {
            match key {
                $(ApiKey::$variant => Some(<$req>::default().encode(buf, version)),)*
                _ => None,
            }
        }

        impl RequestBody {
            pub(crate) fn decode(key: ApiKey, buf: &mut Bytes, version: i16) -> anyhow::Result<Option<Self>> {
                Ok(match key {
                    $(ApiKey::$variant => Some(RequestBody::$variant(<$req>::decode(buf, version)?)),)*
                    _ => None,
                })
            }
        }

        impl ResponseBody {
            pub(crate) fn encode<B: kafka_protocol::protocol::buf::ByteBufMut>(&self, buf: &mut B, version: i16) -> anyhow::Result<()> {
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
    DeleteRecords: DeleteRecordsRequest => DeleteRecordsResponse;
    OffsetForLeaderEpoch: OffsetForLeaderEpochRequest => OffsetForLeaderEpochResponse;
    TxnOffsetCommit: TxnOffsetCommitRequest => TxnOffsetCommitResponse;
    DescribeAcls: DescribeAclsRequest => DescribeAclsResponse;
    CreateAcls: CreateAclsRequest => CreateAclsResponse;
    DeleteAcls: DeleteAclsRequest => DeleteAclsResponse;
    DescribeConfigs: DescribeConfigsRequest => DescribeConfigsResponse;
    AlterConfigs: AlterConfigsRequest => AlterConfigsResponse;
    AlterReplicaLogDirs: AlterReplicaLogDirsRequest => AlterReplicaLogDirsResponse;
    DescribeLogDirs: DescribeLogDirsRequest => DescribeLogDirsResponse;
    CreatePartitions: CreatePartitionsRequest => CreatePartitionsResponse;
    DeleteGroups: DeleteGroupsRequest => DeleteGroupsResponse;
    ElectLeaders: ElectLeadersRequest => ElectLeadersResponse;
    IncrementalAlterConfigs: IncrementalAlterConfigsRequest => IncrementalAlterConfigsResponse;
    AlterPartitionReassignments: AlterPartitionReassignmentsRequest => AlterPartitionReassignmentsResponse;
    ListPartitionReassignments: ListPartitionReassignmentsRequest => ListPartitionReassignmentsResponse;
    OffsetDelete: OffsetDeleteRequest => OffsetDeleteResponse;
    DescribeClientQuotas: DescribeClientQuotasRequest => DescribeClientQuotasResponse;
    AlterClientQuotas: AlterClientQuotasRequest => AlterClientQuotasResponse;
    DescribeUserScramCredentials: DescribeUserScramCredentialsRequest => DescribeUserScramCredentialsResponse;
    DescribeQuorum: DescribeQuorumRequest => DescribeQuorumResponse;
    SaslHandshake: SaslHandshakeRequest => SaslHandshakeResponse;
    SaslAuthenticate: SaslAuthenticateRequest => SaslAuthenticateResponse;
    AlterUserScramCredentials: AlterUserScramCredentialsRequest => AlterUserScramCredentialsResponse;
    UpdateFeatures: UpdateFeaturesRequest => UpdateFeaturesResponse;
    DescribeCluster: DescribeClusterRequest => DescribeClusterResponse;
    DescribeProducers: DescribeProducersRequest => DescribeProducersResponse;
    DescribeTopicPartitions: DescribeTopicPartitionsRequest => DescribeTopicPartitionsResponse;
    AddPartitionsToTxn: AddPartitionsToTxnRequest => AddPartitionsToTxnResponse;
    AddOffsetsToTxn: AddOffsetsToTxnRequest => AddOffsetsToTxnResponse;
    EndTxn: EndTxnRequest => EndTxnResponse;
    WriteTxnMarkers: WriteTxnMarkersRequest => WriteTxnMarkersResponse;
    DescribeTransactions: DescribeTransactionsRequest => DescribeTransactionsResponse;
    ListTransactions: ListTransactionsRequest => ListTransactionsResponse;
    ConsumerGroupHeartbeat: ConsumerGroupHeartbeatRequest => ConsumerGroupHeartbeatResponse;
    ConsumerGroupDescribe: ConsumerGroupDescribeRequest => ConsumerGroupDescribeResponse;
    ShareGroupHeartbeat: ShareGroupHeartbeatRequest => ShareGroupHeartbeatResponse;
    ShareGroupDescribe: ShareGroupDescribeRequest => ShareGroupDescribeResponse;
    ShareFetch: ShareFetchRequest => ShareFetchResponse;
    ShareAcknowledge: ShareAcknowledgeRequest => ShareAcknowledgeResponse;
    DescribeShareGroupOffsets: DescribeShareGroupOffsetsRequest => DescribeShareGroupOffsetsResponse;
    AlterShareGroupOffsets: AlterShareGroupOffsetsRequest => AlterShareGroupOffsetsResponse;
    DeleteShareGroupOffsets: DeleteShareGroupOffsetsRequest => DeleteShareGroupOffsetsResponse;
    ReadShareGroupState: ReadShareGroupStateRequest => ReadShareGroupStateResponse;
    WriteShareGroupState: WriteShareGroupStateRequest => WriteShareGroupStateResponse;
}
