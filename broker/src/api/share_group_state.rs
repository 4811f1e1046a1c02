//! ReadShareGroupState and WriteShareGroupState (KIP-932's share coordinator APIs): another
//! broker, leading some of a share group's partitions, reads their state from this node, the
//! group's coordinator, or stores it here (`share_persister.rs` is the sending side). A write
//! is answered once `__consumer_offsets` has it on its ISR.
//!
//! Only brokers may: CLUSTER_ACTION on the cluster, else every partition is
//! CLUSTER_AUTHORIZATION_FAILED, as Kafka answers its inter-broker APIs.

use futures::future::join_all;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::read_share_group_state_response::{self as read_resp, ReadStateResult};
use kafka_protocol::messages::write_share_group_state_response::{self as write_resp, WriteStateResult};
use kafka_protocol::messages::{
    ReadShareGroupStateRequest, ReadShareGroupStateResponse, WriteShareGroupStateRequest, WriteShareGroupStateResponse,
};

use super::{str_bytes, RequestContext};
use crate::metadata::acls::AclOperation;
use crate::share::state::{ShareState, StateBatch};

fn allowed(ctx: &RequestContext) -> bool {
    let image = ctx.broker.metadata.image();
    ctx.session
        .access(&ctx.broker.security.authorizer, &image.acls)
        .authorize_cluster(AclOperation::ClusterAction)
}

fn message(text: String) -> Option<kafka_protocol::protocol::StrBytes> {
    Some(str_bytes(text)).filter(|m| !m.is_empty())
}

pub fn handle_read(ctx: &RequestContext, request: ReadShareGroupStateRequest) -> ReadShareGroupStateResponse {
    let allowed = allowed(ctx);
    let group_id = request.group_id.to_string();
    let results = request
        .topics
        .into_iter()
        .map(|topic| {
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let answer = read_resp::PartitionResult::default().with_partition(p.partition);
                    let read = if allowed {
                        ctx.broker
                            .groups
                            .read_share_state(&group_id, topic.topic_id, p.partition)
                    } else {
                        Err((ResponseError::ClusterAuthorizationFailed, String::new()))
                    };
                    match read {
                        Err((error, text)) => answer.with_error_code(error.code()).with_error_message(message(text)),
                        // Nothing stored yet: start offset -1, as Kafka's uninitialized state.
                        Ok(None) => answer.with_state_epoch(0).with_start_offset(-1),
                        Ok(Some(state)) => answer
                            .with_state_epoch(state.state_epoch)
                            .with_start_offset(state.start_offset)
                            .with_state_batches(state.batches.iter().map(Into::into).collect()),
                    }
                })
                .collect();
            ReadStateResult::default()
                .with_topic_id(topic.topic_id)
                .with_partitions(partitions)
        })
        .collect();
    ReadShareGroupStateResponse::default().with_results(results)
}

pub async fn handle_write(ctx: RequestContext, request: WriteShareGroupStateRequest) -> WriteShareGroupStateResponse {
    let allowed = allowed(&ctx);
    let group_id = request.group_id.to_string();
    let topics = request.topics.iter().map(|topic| {
        let (ctx, group_id) = (&ctx, &group_id);
        async move {
            let partitions = topic.partitions.iter().map(|p| async move {
                let state = ShareState {
                    state_epoch: p.state_epoch,
                    leader_epoch: p.leader_epoch,
                    start_offset: p.start_offset,
                    batches: p.state_batches.iter().map(StateBatch::from).collect(),
                };
                let written = if allowed {
                    ctx.broker
                        .groups
                        .write_share_state(group_id, topic.topic_id, p.partition, state)
                        .await
                } else {
                    Err((ResponseError::ClusterAuthorizationFailed, String::new()))
                };
                let answer = write_resp::PartitionResult::default().with_partition(p.partition);
                match written {
                    Ok(()) => answer,
                    Err((error, text)) => answer.with_error_code(error.code()).with_error_message(message(text)),
                }
            });
            WriteStateResult::default()
                .with_topic_id(topic.topic_id)
                .with_partitions(join_all(partitions).await)
        }
    });
    WriteShareGroupStateResponse::default().with_results(join_all(topics).await)
}
