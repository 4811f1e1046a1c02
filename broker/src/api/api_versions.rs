//! ApiVersions: the APIs and version ranges this broker serves, and (v3+) the features: the
//! levels it supports (`controller::features`) and those finalized, by UpdateFeatures in the
//! metadata image or else by this node's `transaction.version` setting. Java clients from 4.0
//! and franz-go use transactions v2 (KIP-890 part 2) only when `transaction.version` is 2.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::api_versions_response::{ApiVersion, FinalizedFeatureKey, SupportedFeatureKey};
use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::protocol::StrBytes;
use sluice_protocol::versions::all_supported;

use super::RequestContext;
use crate::controller::features::{GROUP_VERSION, SHARE_VERSION, SUPPORTED_FEATURES, TRANSACTION_VERSION};

pub fn handle(ctx: &RequestContext, _request: ApiVersionsRequest) -> ApiVersionsResponse {
    let image = ctx.broker.metadata.image();
    let transaction_version = ctx.broker.transaction_version(&image);
    let group_version = ctx.broker.group_version(&image);
    let share_version = ctx.broker.share_version(&image);
    with_features(
        &[
            (GROUP_VERSION, group_version),
            (SHARE_VERSION, share_version),
            (TRANSACTION_VERSION, transaction_version),
        ],
        image.features_epoch,
    )
}

/// Every API's range, the supported features, and `finalized` (name, level) with `epoch`
/// (the metadata offset they last changed at; clients keep the answer of the highest).
fn with_features(finalized: &[(&'static str, i16)], epoch: i64) -> ApiVersionsResponse {
    let supported = SUPPORTED_FEATURES
        .iter()
        .map(|(name, min, max)| {
            SupportedFeatureKey::default()
                .with_name(StrBytes::from_static_str(name))
                .with_min_version(*min)
                .with_max_version(*max)
        })
        .collect();
    // Kafka lists a feature as finalized only above level 0.
    let finalized = finalized
        .iter()
        .filter(|(_, level)| *level > 0)
        .map(|(name, level)| {
            FinalizedFeatureKey::default()
                .with_name(StrBytes::from_static_str(name))
                .with_min_version_level(*level)
                .with_max_version_level(*level)
        })
        .collect();
    without_features()
        .with_supported_features(supported)
        .with_finalized_features_epoch(epoch)
        .with_finalized_features(finalized)
}

fn without_features() -> ApiVersionsResponse {
    ApiVersionsResponse::default().with_api_keys(api_keys())
}

/// The v0 reply to a too-new ApiVersions: UNSUPPORTED_VERSION plus our ranges, so the client
/// retries with a version we list.
pub fn unsupported_version_reply() -> ApiVersionsResponse {
    without_features().with_error_code(ResponseError::UnsupportedVersion.code())
}

fn api_keys() -> Vec<ApiVersion> {
    all_supported()
        .map(|(key, range)| {
            ApiVersion::default()
                .with_api_key(key as i16)
                .with_min_version(range.min)
                .with_max_version(range.max)
        })
        .collect()
}
