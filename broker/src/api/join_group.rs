//! JoinGroup: a member (re)joins its group; the answer waits for the rebalance to settle.

use std::net::SocketAddr;
use std::sync::Arc;

use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::{JoinGroupRequest, JoinGroupResponse};
use uuid::Uuid;

use super::str_bytes;
use crate::broker::Broker;
use crate::group::coordinator::JoinRequest;

/// From v4 a new member first gets MEMBER_ID_REQUIRED and an id to rejoin with (KIP-394).
const FIRST_VERSION_REQUIRING_MEMBER_ID: i16 = 4;

pub async fn handle(
    broker: Arc<Broker>,
    request: JoinGroupRequest,
    version: i16,
    client_id: String,
    peer: SocketAddr,
) -> JoinGroupResponse {
    let instance_id = request.group_instance_id.map(|i| i.to_string());
    let prefix = instance_id.clone().unwrap_or_else(|| client_id.clone());
    let join = JoinRequest {
        group_id: request.group_id.0.to_string(),
        member_id: request.member_id.to_string(),
        group_instance_id: instance_id,
        client_id,
        client_host: format!("/{}", peer.ip()),
        session_timeout_ms: request.session_timeout_ms,
        // v0 has no rebalance timeout: the session timeout stands in, as in Kafka.
        rebalance_timeout_ms: if version == 0 {
            request.session_timeout_ms
        } else {
            request.rebalance_timeout_ms
        },
        protocol_type: request.protocol_type.to_string(),
        protocols: request
            .protocols
            .into_iter()
            .map(|p| (p.name.to_string(), p.metadata))
            .collect(),
        require_known_member_id: version >= FIRST_VERSION_REQUIRING_MEMBER_ID,
        new_member_id: format!("{prefix}-{}", Uuid::new_v4()),
    };
    let result = broker.groups.join(join).await;
    JoinGroupResponse::default()
        .with_error_code(result.error.map_or(0, |e| e.code()))
        .with_generation_id(result.generation_id)
        .with_protocol_type(result.protocol_type.map(str_bytes))
        .with_protocol_name(result.protocol_name.map(str_bytes))
        .with_leader(str_bytes(result.leader_id))
        .with_member_id(str_bytes(result.member_id))
        .with_members(
            result
                .members
                .into_iter()
                .map(|m| {
                    JoinGroupResponseMember::default()
                        .with_member_id(str_bytes(m.member_id))
                        .with_group_instance_id(m.group_instance_id.map(str_bytes))
                        .with_metadata(m.metadata)
                })
                .collect(),
        )
}
