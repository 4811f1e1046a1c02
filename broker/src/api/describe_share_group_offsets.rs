//! DescribeShareGroupOffsets (KIP-932, v1 with KIP-1226's lag): each share-partition's start
//! offset (SPSO) and the records from there to the high watermark not yet done with, as
//! kafka-share-groups --describe --offsets shows them. Without topics, every share-partition
//! the group has; a partition it has not fetched yet has start offset -1, as Kafka's
//! uninitialized ones.
//!
//! Answered by the group's coordinator from the states the partitions' leaders stored there
//! (`share_state.rs` in the group coordinator), with the high watermark of this node's
//! replica for the lag (-1 when it has none).
//!
//! Needs DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED) and on each topic, whose
//! partitions are otherwise left out, as Kafka.

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_share_group_offsets_response::{
    DescribeShareGroupOffsetsResponseGroup, DescribeShareGroupOffsetsResponsePartition,
    DescribeShareGroupOffsetsResponseTopic,
};
use kafka_protocol::messages::{DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse, TopicName};
use uuid::Uuid;

use super::{str_bytes, RequestContext};
use crate::metadata::acls::{AclOperation, ResourceType};
use crate::share::state::ShareState;

pub fn handle(ctx: &RequestContext, request: DescribeShareGroupOffsetsRequest) -> DescribeShareGroupOffsetsResponse {
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    let access = session.access(&broker.security.authorizer, &image.acls);
    let groups = request
        .groups
        .into_iter()
        .map(|group| {
            let answer = DescribeShareGroupOffsetsResponseGroup::default().with_group_id(group.group_id.clone());
            let group_id = group.group_id.0.to_string();
            if !access.authorize(AclOperation::Describe, ResourceType::Group, &group_id) {
                return answer.with_error_code(ResponseError::GroupAuthorizationFailed.code());
            }
            if let Err((error, message)) = broker.groups.describe_share_group(&group_id) {
                return answer
                    .with_error_code(error.code())
                    .with_error_message(Some(str_bytes(message)).filter(|m| !m.is_empty()));
            }
            // (topic id, partition) wanted, by topic id.
            let states: BTreeMap<(Uuid, i32), ShareState> =
                broker.groups.share_states_of(&group_id).into_iter().collect();
            let wanted: Vec<(Uuid, i32)> = match group.topics {
                None => states.keys().copied().collect(),
                Some(topics) => topics
                    .iter()
                    .filter_map(|t| {
                        image
                            .topic(&t.topic_name.0)
                            .map(|found| (found.topic_id, &t.partitions))
                    })
                    .flat_map(|(id, partitions)| partitions.iter().map(move |p| (id, *p)))
                    .collect(),
            };
            let mut by_topic: BTreeMap<Uuid, Vec<DescribeShareGroupOffsetsResponsePartition>> = BTreeMap::new();
            for (topic_id, index) in wanted {
                let Some(topic) = image.topic_by_id(&topic_id) else {
                    continue;
                };
                if !access.authorize(AclOperation::Describe, ResourceType::Topic, &topic.name) {
                    continue;
                }
                let leader_epoch = usize::try_from(index)
                    .ok()
                    .and_then(|i| topic.partitions.get(i))
                    .map_or(-1, |r| r.leader_epoch);
                let (start_offset, lag) = match states.get(&(topic_id, index)) {
                    None => (-1, -1),
                    Some(state) => {
                        let lag = broker
                            .replicas
                            .get(topic_id, index)
                            .map_or(-1, |replica| state.lag(replica.high_watermark()));
                        (state.start_offset, lag)
                    }
                };
                by_topic.entry(topic_id).or_default().push(
                    DescribeShareGroupOffsetsResponsePartition::default()
                        .with_partition_index(index)
                        .with_start_offset(start_offset)
                        .with_leader_epoch(leader_epoch)
                        .with_lag(lag),
                );
            }
            answer.with_topics(
                by_topic
                    .into_iter()
                    .filter_map(|(topic_id, partitions)| {
                        let name = image.topic_by_id(&topic_id)?.name.clone();
                        Some(
                            DescribeShareGroupOffsetsResponseTopic::default()
                                .with_topic_name(TopicName(str_bytes(name)))
                                .with_topic_id(topic_id)
                                .with_partitions(partitions),
                        )
                    })
                    .collect(),
            )
        })
        .collect();
    DescribeShareGroupOffsetsResponse::default().with_groups(groups)
}
