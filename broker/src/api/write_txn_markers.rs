//! WriteTxnMarkers: a transaction coordinator (another broker, or this one) asks the leader of
//! each partition of a completing transaction to append its COMMIT or ABORT marker. Each
//! partition is answered once its ISR has the marker; a marker on `__consumer_offsets` then
//! makes the producer's pending transactional offset commits take effect or go.
//!
//! Only brokers may: CLUSTER_ACTION on the cluster, else every partition is
//! CLUSTER_AUTHORIZATION_FAILED (Kafka's answer). A marker older than what the partition has
//! seen (producer epoch, coordinator epoch) is refused by the partition and changes nothing.

use futures::future::join_all;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{WriteTxnMarkersRequest, WriteTxnMarkersResponse};

use super::RequestContext;
use crate::metadata::acls::AclOperation;

pub async fn handle(ctx: RequestContext, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse {
    let RequestContext { broker, session, .. } = ctx;
    let allowed = {
        let image = broker.metadata.image();
        session
            .access(&broker.security.authorizer, &image.acls)
            .authorize_cluster(AclOperation::ClusterAction)
    };
    let markers = request.markers.iter().map(|marker| {
        let broker = broker.clone();
        async move {
            let topics = marker.topics.iter().map(|topic| {
                let broker = broker.clone();
                async move {
                    let partitions = topic.partition_indexes.iter().map(|index| {
                        let broker = broker.clone();
                        async move {
                            let result = if allowed {
                                broker
                                    .txn
                                    .write_marker(
                                        topic.name.0.as_str(),
                                        *index,
                                        marker.producer_id.0,
                                        marker.producer_epoch,
                                        marker.coordinator_epoch,
                                        marker.transaction_result,
                                    )
                                    .await
                            } else {
                                Err(ResponseError::ClusterAuthorizationFailed)
                            };
                            WritableTxnMarkerPartitionResult::default()
                                .with_partition_index(*index)
                                .with_error_code(result.err().map_or(0, |e| e.code()))
                        }
                    });
                    WritableTxnMarkerTopicResult::default()
                        .with_name(topic.name.clone())
                        .with_partitions(join_all(partitions).await)
                }
            });
            WritableTxnMarkerResult::default()
                .with_producer_id(marker.producer_id)
                .with_topics(join_all(topics).await)
        }
    });
    WriteTxnMarkersResponse::default().with_markers(join_all(markers).await)
}
