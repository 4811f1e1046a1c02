//! ShareAcknowledge (KIP-932): a share group member acknowledges records it acquired, outside a
//! fetch (explicit acknowledgement, or on closing with share session epoch -1). The epoch must
//! be the session's next (ShareAcknowledge never opens a session); closing releases whatever
//! the member still holds on this node. The answer goes once the acknowledgements are stored
//! at the group's coordinator (`share_persister.rs`).
//!
//! Needs READ on the group and on each topic, as ShareFetch.

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::share_acknowledge_response::{
    LeaderIdAndEpoch, NodeEndpoint, PartitionData, ShareAcknowledgeTopicResponse,
};
use kafka_protocol::messages::{BrokerId, ShareAcknowledgeRequest, ShareAcknowledgeResponse};
use uuid::Uuid;

use super::share_fetch::{acknowledge, code, node_endpoints, store_acknowledgements, Acks, PartitionOutcome};
use super::{str_bytes, RequestContext};
use crate::config::group_configs;
use crate::metadata::acls::{AclOperation, ResourceType};
use crate::share::session::FINAL_EPOCH;

pub async fn handle(ctx: RequestContext, request: ShareAcknowledgeRequest) -> ShareAcknowledgeResponse {
    let RequestContext { broker, session, .. } = &ctx;
    let image = broker.metadata.image();
    let failed = |error: ResponseError, message: String| {
        ShareAcknowledgeResponse::default()
            .with_error_code(error.code())
            .with_error_message(Some(str_bytes(message)).filter(|m| !m.is_empty()))
    };
    let (Some(group_id), Some(member_id)) = (request.group_id.as_ref(), request.member_id.as_ref()) else {
        return failed(
            ResponseError::InvalidRequest,
            "ShareAcknowledge needs a GroupId and a MemberId.".into(),
        );
    };
    let (group_id, member_id) = (group_id.0.to_string(), member_id.to_string());
    let access = session.access(&broker.security.authorizer, &image.acls);
    if !access.authorize(AclOperation::Read, ResourceType::Group, &group_id) {
        return failed(ResponseError::GroupAuthorizationFailed, String::new());
    }
    if let Err((error, message)) = broker.share.sessions.step(
        &group_id,
        &member_id,
        request.share_session_epoch,
        &[],
        &[],
        false,
        session.connection_id,
    ) {
        return failed(error, message);
    }
    let mut acks = Acks::new();
    for topic in &request.topics {
        for p in &topic.partitions {
            acks.entry((topic.topic_id, p.partition_index)).or_default().extend(
                p.acknowledgement_batches
                    .iter()
                    .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types.clone())),
            );
        }
    }
    let mut outcomes: BTreeMap<(Uuid, i32), PartitionOutcome> = BTreeMap::new();
    let renew = request.is_renew_ack;
    let stores = acknowledge(
        broker,
        &image,
        &group_id,
        &member_id,
        &access,
        acks,
        renew,
        &mut outcomes,
    );
    store_acknowledgements(broker, stores, &mut outcomes).await;
    if request.share_session_epoch == FINAL_EPOCH {
        broker
            .share_persister
            .close_session(&broker.share, &group_id, &member_id)
            .await;
    }
    let mut topics: BTreeMap<Uuid, Vec<PartitionData>> = BTreeMap::new();
    let mut leaders = Vec::new();
    for ((topic_id, index), o) in outcomes {
        let (leader_id, leader_epoch) = o.leader.unwrap_or((-1, -1));
        if leader_id >= 0 {
            leaders.push(leader_id);
        }
        let (error_code, error_message) = code(o.ack_error);
        topics.entry(topic_id).or_default().push(
            PartitionData::default()
                .with_partition_index(index)
                .with_error_code(error_code)
                .with_error_message(error_message)
                .with_current_leader(
                    LeaderIdAndEpoch::default()
                        .with_leader_id(leader_id)
                        .with_leader_epoch(leader_epoch),
                ),
        );
    }
    // v2: how long the records renewed (and any still held) stay locked.
    let group_configs = image.group_configs(&group_id);
    let lock_ms = broker
        .share
        .limits(group_configs::share_record_lock_duration_ms(group_configs))
        .record_lock_duration_ms;
    ShareAcknowledgeResponse::default()
        .with_acquisition_lock_timeout_ms(i32::try_from(lock_ms).unwrap_or(i32::MAX))
        .with_responses(
            topics
                .into_iter()
                .map(|(topic_id, partitions)| {
                    ShareAcknowledgeTopicResponse::default()
                        .with_topic_id(topic_id)
                        .with_partitions(partitions)
                })
                .collect(),
        )
        .with_node_endpoints(
            node_endpoints(&image, &session.listener, &leaders)
                .into_iter()
                .map(|(id, host, port, rack)| {
                    NodeEndpoint::default()
                        .with_node_id(BrokerId(id))
                        .with_host(host)
                        .with_port(port)
                        .with_rack(rack)
                })
                .collect(),
        )
}
