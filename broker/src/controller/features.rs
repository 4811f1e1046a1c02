//! Finalized features (Kafka's `FeatureControlManager`): UpdateFeatures turns into one
//! `FeatureLevel` record per feature, all or none. The features Sluice supports and their
//! ranges are here; ApiVersions lists them and the levels finalized.
//!
//! Kafka's `metadata.version` is not among them: Sluice's metadata format is versioned by its
//! build (`metadata::codec::METADATA_VERSION`), and a node refuses entries newer than it reads,
//! so there is nothing for an operator to finalize. `group.version` 1 turns on KIP-848's
//! consumer groups (Kafka 4.0's default); `share.version` 1 KIP-932's share groups (4.2's).

use kafka_protocol::error::ResponseError;

use crate::metadata::image::MetadataImage;
use crate::metadata::outcome::ApiError;
use crate::metadata::records::MetadataRecord;

/// `transaction.version`: 1 is KIP-890 part 1, 2 its part 2 (transactions v2).
pub const TRANSACTION_VERSION: &str = "transaction.version";

/// `group.version`: 1 serves KIP-848 consumer groups (ConsumerGroupHeartbeat).
pub const GROUP_VERSION: &str = "group.version";

/// `share.version`: 1 serves KIP-932 share groups (ShareGroupHeartbeat, ShareFetch).
pub const SHARE_VERSION: &str = "share.version";

/// Each supported feature with the lowest and highest level this build implements.
pub const SUPPORTED_FEATURES: &[(&str, i16, i16)] =
    &[(GROUP_VERSION, 0, 1), (SHARE_VERSION, 0, 1), (TRANSACTION_VERSION, 0, 2)];

/// The level range of `name`, if Sluice supports it.
pub fn supported_range(name: &str) -> Option<(i16, i16)> {
    SUPPORTED_FEATURES
        .iter()
        .find(|(n, ..)| *n == name)
        .map(|(_, min, max)| (*min, *max))
}

/// Why finalizing `name` at `level` is refused, if it is: an unknown feature, or a level out
/// of the supported range. Sentences a `kafka-features` user reads.
pub fn refusal(name: &str, level: i16) -> Option<String> {
    if name == "metadata.version" {
        return Some(
            "Sluice has no metadata.version to change: its metadata format is versioned by the sluice build \
             (upgrade each node's binary, one at a time)"
                .to_string(),
        );
    }
    let Some((min, max)) = supported_range(name) else {
        let known: Vec<&str> = SUPPORTED_FEATURES.iter().map(|(n, ..)| *n).collect();
        return Some(format!(
            "Sluice does not support the feature {name}; it supports {}",
            known.join(", ")
        ));
    };
    (level < min || level > max)
        .then(|| format!("Invalid update version {level} for feature {name}. Sluice supports levels {min} to {max}."))
}

/// The records finalizing each of `updates`, or the first refusal (INVALID_UPDATE_VERSION)
/// and none.
pub fn update_features(image: &MetadataImage, updates: &[(String, i16)]) -> Result<Vec<MetadataRecord>, ApiError> {
    let mut records = Vec::with_capacity(updates.len());
    for (name, level) in updates {
        if let Some(why) = refusal(name, *level) {
            return Err(ApiError::new(ResponseError::InvalidUpdateVersion, why));
        }
        if image.features.get(name) == Some(level) {
            continue;
        }
        records.push(MetadataRecord::FeatureLevel {
            name: name.clone(),
            level: *level,
        });
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn levels(records: &[MetadataRecord]) -> Vec<(String, i16)> {
        records
            .iter()
            .filter_map(|r| match r {
                MetadataRecord::FeatureLevel { name, level } => Some((name.clone(), *level)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn supported_features_are_finalized_and_a_level_already_finalized_writes_nothing() {
        let mut image = MetadataImage::default();
        let records = update_features(&image, &[(TRANSACTION_VERSION.to_string(), 1)]).unwrap();
        assert_eq!(levels(&records), vec![(TRANSACTION_VERSION.to_string(), 1)]);
        for r in &records {
            image.apply(r);
        }
        assert_eq!(image.features.get(TRANSACTION_VERSION), Some(&1));
        let epoch = image.features_epoch;
        assert!(epoch > 0);
        assert!(update_features(&image, &[(TRANSACTION_VERSION.to_string(), 1)])
            .unwrap()
            .is_empty());
        // Level 0 is kept: it overrides the nodes' transaction.version setting.
        for r in &update_features(&image, &[(TRANSACTION_VERSION.to_string(), 0)]).unwrap() {
            image.apply(r);
        }
        assert_eq!(image.features.get(TRANSACTION_VERSION), Some(&0));
        assert!(image.features_epoch > epoch);
    }

    #[test]
    fn unknown_features_and_levels_out_of_range_are_refused_and_nothing_is_written() {
        let image = MetadataImage::default();
        for (name, level, says) in [
            (TRANSACTION_VERSION, 3, "Sluice supports levels 0 to 2"),
            (TRANSACTION_VERSION, -1, "Invalid update version -1"),
            ("metadata.version", 27, "versioned by the sluice build"),
            ("streams.version", 1, "does not support the feature streams.version"),
        ] {
            let updates = [(TRANSACTION_VERSION.to_string(), 2), (name.to_string(), level)];
            let refused = update_features(&image, &updates).unwrap_err();
            assert_eq!(refused.code(), ResponseError::InvalidUpdateVersion.code());
            assert!(refused.message.contains(says), "{name}={level}: {}", refused.message);
        }
    }
}
