//! Builders shared by the controller's unit tests: images with registered brokers, topics to
//! create, and deciding and applying commands the way every node does.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::{create_topic, decide, Outcome};
use crate::metadata::image::MetadataImage;
use crate::metadata::records::{Endpoint, MetadataCommand, MetadataRecord, NewTopic};

pub(super) fn image_with_brokers(ids: &[i32]) -> MetadataImage {
    let mut image = MetadataImage::new("test".into());
    for id in ids {
        image.apply(&MetadataRecord::RegisterBroker {
            broker_id: *id,
            incarnation_id: Uuid::nil(),
            endpoints: vec![Endpoint::plaintext("127.0.0.1", 9092 + id)],
            rack: None,
            replica_capacity: None,
        });
    }
    image
}

pub(super) fn new_topic(name: &str, partitions: i32, rf: i16) -> NewTopic {
    NewTopic {
        name: name.into(),
        num_partitions: partitions,
        replication_factor: rf,
        replication_factor_defaulted: false,
        assignments: None,
        configs: BTreeMap::new(),
    }
}

pub(super) fn apply_all(image: &mut MetadataImage, records: &[MetadataRecord]) {
    records.iter().for_each(|r| image.apply(r));
}

/// A controlled shutdown of a broker registered with the nil incarnation.
pub(super) fn shutdown_of(broker_id: i32) -> MetadataCommand {
    MetadataCommand::ControlledShutdown {
        broker_id,
        incarnation_id: Uuid::nil(),
    }
}

/// Broker `broker_id` (registered with the nil incarnation) is unfenced.
pub(super) fn unfence(image: &mut MetadataImage, broker_id: i32) {
    decide_and_apply(
        image,
        MetadataCommand::UnfenceBroker {
            broker_id,
            incarnation_id: Some(Uuid::nil()),
        },
    );
}

pub(super) fn decide_and_apply(image: &mut MetadataImage, command: MetadataCommand) -> Outcome {
    let (records, outcome) = decide(image, &command).unwrap();
    apply_all(image, &records);
    outcome
}

/// A registration that must be accepted (the broker is not registered, or no longer live).
pub(super) fn register(image: &mut MetadataImage, broker_id: i32, incarnation: u128) {
    let command = MetadataCommand::RegisterBroker {
        broker_id,
        incarnation_id: Uuid::from_u128(incarnation),
        endpoints: vec![],
        rack: None,
        replica_capacity: None,
        wait_for_previous_session: true,
    };
    assert_eq!(decide_and_apply(image, command), Outcome::Done);
}

/// Brokers 1..=n and topic "t" (id 1) with one partition on all of them, led by 1.
pub(super) fn one_partition_on(n: i32) -> MetadataImage {
    let brokers: Vec<i32> = (1..=n).collect();
    let mut image = image_with_brokers(&brokers);
    let mut topic = new_topic("t", 1, n as i16);
    topic.assignments = Some(vec![brokers]);
    let records = create_topic(&image, &topic, Uuid::from_u128(1)).unwrap();
    apply_all(&mut image, &records);
    image
}

/// An AlterPartition of "t"-0 (topic id 1), as its leader would send it.
pub(super) fn alter_isr(leader_id: i32, leader_epoch: i32, partition_epoch: i32, new_isr: &[i32]) -> MetadataCommand {
    MetadataCommand::AlterPartition {
        topic_id: Uuid::from_u128(1),
        partition: 0,
        leader_id,
        leader_epoch,
        partition_epoch,
        new_isr: new_isr.to_vec(),
    }
}
