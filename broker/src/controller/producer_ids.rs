//! Producer id blocks (Kafka's `ProducerIdControlManager`): each broker takes a block of ids
//! at a time from the quorum, so no two producers anywhere get the same id.

use crate::metadata::image::MetadataImage;
use crate::metadata::outcome::Outcome;
use crate::metadata::records::MetadataRecord;

/// Producer ids handed to a broker at a time (Kafka's block size).
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;

/// Hands `broker_id` the next unused block; the image remembers where the following one starts.
pub fn allocate_producer_ids(image: &MetadataImage, broker_id: i32) -> (Vec<MetadataRecord>, Outcome) {
    let first = image.next_producer_id;
    let record = MetadataRecord::ProducerIds {
        broker_id,
        next_block_start: first + PRODUCER_ID_BLOCK_SIZE,
    };
    let outcome = Outcome::ProducerIdBlock {
        first,
        size: PRODUCER_ID_BLOCK_SIZE,
    };
    (vec![record], outcome)
}

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
