//! ApiVersions: the APIs and version ranges this broker serves, and (v3+) the features: the
//! `transaction.version` levels it supports and the one finalized (`transaction.version`
//! setting). Java clients from 4.0 and franz-go use transactions v2 (KIP-890 part 2) only
//! when the finalized level is 2.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::api_versions_response::{ApiVersion, FinalizedFeatureKey, SupportedFeatureKey};
use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::protocol::StrBytes;
use sluice_protocol::versions::all_supported;

use super::RequestContext;

const TRANSACTION_VERSION: &str = "transaction.version";
/// The highest `transaction.version` this broker implements.
const MAX_TRANSACTION_VERSION: i16 = 2;
/// The epoch of the finalized features. They come from settings, not from the metadata log,
/// so it never moves: a client reads them once per connection it opens.
const FINALIZED_FEATURES_EPOCH: i64 = 0;

pub fn handle(ctx: &RequestContext, _request: ApiVersionsRequest) -> ApiVersionsResponse {
    with_features(ctx.broker.config.txn.transaction_version)
}

/// Every API's range and the `transaction.version` feature finalized at `transaction_version`.
fn with_features(transaction_version: i16) -> ApiVersionsResponse {
    let name = || StrBytes::from_static_str(TRANSACTION_VERSION);
    let mut response = without_features()
        .with_supported_features(vec![SupportedFeatureKey::default()
            .with_name(name())
            .with_min_version(0)
            .with_max_version(MAX_TRANSACTION_VERSION)])
        .with_finalized_features_epoch(FINALIZED_FEATURES_EPOCH);
    if transaction_version > 0 {
        // Kafka lists a feature as finalized only above level 0.
        response = response.with_finalized_features(vec![FinalizedFeatureKey::default()
            .with_name(name())
            .with_min_version_level(transaction_version)
            .with_max_version_level(transaction_version)]);
    }
    response
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
