//! ApiVersions: the APIs and version ranges this broker serves.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::ApiVersionsResponse;
use sluice_protocol::versions::all_supported;

pub fn handle() -> ApiVersionsResponse {
    ApiVersionsResponse::default().with_api_keys(api_keys())
}

/// The v0 reply to a too-new ApiVersions: UNSUPPORTED_VERSION plus our ranges, so the client
/// retries with a version we list.
pub fn unsupported_version_reply() -> ApiVersionsResponse {
    handle().with_error_code(ResponseError::UnsupportedVersion.code())
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
