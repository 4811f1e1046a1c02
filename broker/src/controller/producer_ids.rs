//! Producer id blocks (Kafka's `ProducerIdControlManager`): each broker takes a block of ids
//! at a time from the quorum, so no two producers anywhere get the same id.

/// Producer ids handed to a broker at a time (Kafka's block size).
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;

#[cfg(test)]
mod tests {
    use crate::controller::test_support::*;
    use crate::controller::{decide, Outcome};
    use crate::metadata::records::MetadataCommand;

    #[test]
    fn producer_id_blocks_never_overlap() {
        let mut image = image_with_brokers(&[1, 2]);
        let mut blocks = Vec::new();
        for broker_id in [1, 2, 1] {
            let (records, outcome) = decide(&image, &MetadataCommand::AllocateProducerIds { broker_id }).unwrap();
            apply_all(&mut image, &records);
            blocks.push(outcome);
        }
        assert_eq!(
            blocks,
            vec![
                Outcome::ProducerIdBlock { first: 0, size: 1000 },
                Outcome::ProducerIdBlock {
                    first: 1000,
                    size: 1000
                },
                Outcome::ProducerIdBlock {
                    first: 2000,
                    size: 1000
                },
            ]
        );
    }
}
