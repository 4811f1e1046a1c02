//! ListPartitionReassignments (KIP-455; `kafka-reassign-partitions --verify/--list`): the
//! partitions whose move is under way, with the full replica set and the replicas being
//! added and removed, from this broker's metadata image.

use std::sync::Arc;

use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    BrokerId, ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, TopicName,
};

use super::str_bytes;
use crate::broker::Broker;
use crate::metadata::image::{PartitionRegistration, TopicImage};

pub fn handle(broker: &Arc<Broker>, request: ListPartitionReassignmentsRequest) -> ListPartitionReassignmentsResponse {
    let image = broker.metadata.image();
    let mut topics = Vec::new();
    match &request.topics {
        // Every reassigning partition of every topic.
        None => {
            for topic in image.topics.values() {
                let all = (0..topic.partitions.len() as i32).collect::<Vec<_>>();
                push_ongoing(&mut topics, topic, &all);
            }
        }
        // Unknown topics and partitions are left out, as Kafka leaves them out.
        Some(asked) => {
            for t in asked {
                if let Some(topic) = image.topic(&t.name.0) {
                    push_ongoing(&mut topics, topic, &t.partition_indexes);
                }
            }
        }
    }
    ListPartitionReassignmentsResponse::default().with_topics(topics)
}

fn push_ongoing(out: &mut Vec<OngoingTopicReassignment>, topic: &TopicImage, indexes: &[i32]) {
    let partitions: Vec<OngoingPartitionReassignment> = indexes
        .iter()
        .filter_map(|&i| {
            let p = usize::try_from(i).ok().and_then(|u| topic.partitions.get(u))?;
            p.is_reassigning().then(|| ongoing(i, p))
        })
        .collect();
    if !partitions.is_empty() {
        out.push(
            OngoingTopicReassignment::default()
                .with_name(TopicName(str_bytes(topic.name.clone())))
                .with_partitions(partitions),
        );
    }
}

fn ongoing(index: i32, p: &PartitionRegistration) -> OngoingPartitionReassignment {
    let ids = |v: &[i32]| v.iter().map(|&id| BrokerId(id)).collect::<Vec<_>>();
    OngoingPartitionReassignment::default()
        .with_partition_index(index)
        .with_replicas(ids(&p.replicas))
        .with_adding_replicas(ids(&p.adding_replicas))
        .with_removing_replicas(ids(&p.removing_replicas))
}
