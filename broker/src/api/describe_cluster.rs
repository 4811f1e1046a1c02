//! DescribeCluster: cluster id, controller and brokers (the Admin client's describeCluster).
//! Anyone may ask; the cluster's authorized operations, when asked for, are 0 without
//! DESCRIBE on the cluster, as Kafka answers.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{DescribeClusterRequest, DescribeClusterResponse};

use super::metadata::controller_for_clients;
use super::{str_bytes, RequestContext};

/// Kafka's endpoint types: 1 = brokers, 2 = controllers.
const ENDPOINT_TYPE_BROKERS: i8 = 1;

/// Brokers are described by their endpoint on the client's listener.
pub fn handle(ctx: &RequestContext, request: DescribeClusterRequest) -> DescribeClusterResponse {
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    let listener: &str = &session.listener;
    let response = DescribeClusterResponse::default()
        .with_endpoint_type(request.endpoint_type)
        .with_cluster_id(str_bytes(image.cluster_id.clone()))
        .with_controller_id(
            controller_for_clients(broker.metadata.controller_id(), broker.config.node_id, &image, listener).into(),
        );
    if request.endpoint_type != ENDPOINT_TYPE_BROKERS {
        return response
            .with_error_code(ResponseError::UnsupportedEndpointType.code())
            .with_error_message(Some(str_bytes("only broker endpoints (type 1) are served")));
    }
    let brokers = image
        .brokers
        .values()
        .filter(|b| request.include_fenced_brokers || !b.fenced)
        .filter_map(|b| {
            let endpoint = b.endpoint(listener)?;
            Some(
                DescribeClusterBroker::default()
                    .with_broker_id(b.broker_id.into())
                    .with_host(str_bytes(endpoint.host.clone()))
                    .with_port(endpoint.port)
                    .with_rack(b.rack.clone().map(str_bytes))
                    .with_is_fenced(b.fenced),
            )
        })
        .collect();
    let response = response.with_brokers(brokers);
    if request.include_cluster_authorized_operations {
        let access = session.access(&broker.security.authorizer, &image.acls);
        response.with_cluster_authorized_operations(access.cluster_operations())
    } else {
        response
    }
}
