//! UpdateFeatures v0-v2 (`kafka-features upgrade | downgrade | disable`): finalizes feature
//! levels in the metadata quorum, all or none. Needs ALTER on the cluster. Each update is
//! checked here against the level in effect, as Kafka's `FeatureControlManager` does: a lower
//! level needs a downgrade upgrade-type (v0's `allow_downgrade`), a downgrade may not raise
//! the level; the controller then refuses unknown features and levels out of range
//! (`controller::features`). v2 answers with the top-level error alone.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::update_features_response::UpdatableFeatureResult;
use kafka_protocol::messages::{UpdateFeaturesRequest, UpdateFeaturesResponse};

use super::{commit_error, str_bytes, Access, RequestContext};
use crate::controller::features::{self, TRANSACTION_VERSION};
use crate::metadata::acls::AclOperation;
use crate::metadata::records::MetadataCommand;

/// UpdateFeatures' upgrade types (v1+).
const UPGRADE: i8 = 1;
const SAFE_DOWNGRADE: i8 = 2;
const UNSAFE_DOWNGRADE: i8 = 3;
/// The first version without per-feature results.
const TOP_LEVEL_ONLY_SINCE: i16 = 2;

pub async fn handle(ctx: RequestContext, request: UpdateFeaturesRequest) -> UpdateFeaturesResponse {
    let version = ctx.version;
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    if let Some(message) = refusal(session.access(&broker.security.authorizer, &image.acls)) {
        return answer(
            &request,
            version,
            ResponseError::ClusterAuthorizationFailed.code(),
            message,
        );
    }
    let in_effect = |name: &str| match name {
        TRANSACTION_VERSION => broker.transaction_version(&image),
        _ => image.features.get(name).copied().unwrap_or(0),
    };
    let mut updates = Vec::with_capacity(request.feature_updates.len());
    for update in &request.feature_updates {
        let name = update.feature.to_string();
        // v0 has a boolean where v1 has the upgrade type.
        let upgrade_type = match (version, update.allow_downgrade) {
            (0, true) => SAFE_DOWNGRADE,
            (0, false) => UPGRADE,
            _ => update.upgrade_type,
        };
        if let Some(why) = check(&name, in_effect(&name), update.max_version_level, upgrade_type) {
            return answer(&request, version, ResponseError::InvalidUpdateVersion.code(), why);
        }
        if updates.iter().any(|(n, _)| *n == name) {
            let why = format!("The feature {name} is named twice in one request; name it once.");
            return answer(&request, version, ResponseError::InvalidRequest.code(), why);
        }
        updates.push((name, update.max_version_level));
    }
    let command = MetadataCommand::UpdateFeatures { updates };
    if request.validate_only {
        return match crate::controller::decide(&image, &command) {
            Ok(_) => answer(&request, version, 0, String::new()),
            Err(e) => answer(&request, version, e.code(), e.message),
        };
    }
    match broker.commit(command).await {
        Ok(_) => {
            let changed: Vec<String> = request
                .feature_updates
                .iter()
                .map(|u| format!("{}={}", u.feature.as_str(), u.max_version_level))
                .collect();
            tracing::info!(features = ?changed, "finalized feature levels changed by an admin client");
            answer(&request, version, 0, String::new())
        }
        Err(e) => {
            let (code, message) = commit_error(&e);
            answer(&request, version, code, message)
        }
    }
}

/// Why the principal may not change features (ALTER on the cluster), if it may not.
fn refusal(access: Access<'_>) -> Option<String> {
    (!access.authorize_cluster(AclOperation::Alter)).then(|| access.denied_cluster(AclOperation::Alter))
}

/// Why moving `name` from `current` to `level` with `upgrade_type` is refused, if it is.
fn check(name: &str, current: i16, level: i16, upgrade_type: i8) -> Option<String> {
    if let Some(why) = features::refusal(name, level) {
        return Some(why);
    }
    match upgrade_type {
        UPGRADE if level < current => Some(format!(
            "Can not downgrade {name} from {current} to {level} with an upgrade: use the downgrade command \
             (upgrade type SAFE_DOWNGRADE or UNSAFE_DOWNGRADE)."
        )),
        SAFE_DOWNGRADE | UNSAFE_DOWNGRADE if level > current => Some(format!(
            "Can not downgrade {name} from {current} to the higher level {level}: use the upgrade command."
        )),
        UPGRADE | SAFE_DOWNGRADE | UNSAFE_DOWNGRADE => None,
        other => Some(format!(
            "Upgrade type {other} is unknown: use 1 (upgrade), 2 (safe downgrade) or 3 (unsafe downgrade)."
        )),
    }
}

/// The response: `code` with `message` at the top level and (before v2) on every feature.
fn answer(request: &UpdateFeaturesRequest, version: i16, code: i16, message: String) -> UpdateFeaturesResponse {
    let message = (code != 0).then(|| str_bytes(message));
    let results = match version < TOP_LEVEL_ONLY_SINCE {
        false => Vec::new(),
        true => request
            .feature_updates
            .iter()
            .map(|u| {
                UpdatableFeatureResult::default()
                    .with_feature(u.feature.clone())
                    .with_error_code(code)
                    .with_error_message(message.clone())
            })
            .collect(),
    };
    UpdateFeaturesResponse::default()
        .with_error_code(code)
        .with_error_message(message)
        .with_results(results)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::testing::Acls;

    #[test]
    fn changing_features_needs_alter_on_the_cluster() {
        assert!(refusal(Acls::none().allow_cluster(AclOperation::AlterConfigs).access()).is_some());
        assert!(refusal(Acls::none().allow_cluster(AclOperation::Describe).access()).is_some());
        assert_eq!(refusal(Acls::none().allow_cluster(AclOperation::Alter).access()), None);
    }

    #[test]
    fn downgrades_need_a_downgrade_type_and_may_not_raise_the_level() {
        assert_eq!(check(TRANSACTION_VERSION, 1, 2, UPGRADE), None);
        assert_eq!(check(TRANSACTION_VERSION, 2, 2, UPGRADE), None);
        assert!(check(TRANSACTION_VERSION, 2, 1, UPGRADE).is_some_and(|m| m.contains("downgrade command")));
        assert_eq!(check(TRANSACTION_VERSION, 2, 0, SAFE_DOWNGRADE), None);
        assert_eq!(check(TRANSACTION_VERSION, 2, 1, UNSAFE_DOWNGRADE), None);
        assert!(check(TRANSACTION_VERSION, 1, 2, SAFE_DOWNGRADE).is_some_and(|m| m.contains("upgrade command")));
        assert!(check(TRANSACTION_VERSION, 1, 2, 7).is_some_and(|m| m.contains("unknown")));
        assert!(check(TRANSACTION_VERSION, 1, 3, UPGRADE).is_some_and(|m| m.contains("0 to 2")));
        assert_eq!(check("group.version", 0, 1, UPGRADE), None);
        assert_eq!(check("share.version", 0, 1, UPGRADE), None);
        assert!(check("streams.version", 0, 1, UPGRADE).is_some());
    }

    #[test]
    fn before_v2_every_feature_carries_the_error_and_from_v2_only_the_top_level() {
        let request =
            UpdateFeaturesRequest::default().with_feature_updates(vec![Default::default(), Default::default()]);
        let v1 = answer(&request, 1, 95, "no".into());
        assert!(v1.results.len() == 2 && v1.results.iter().all(|r| r.error_code == 95));
        let v2 = answer(&request, 2, 95, "no".into());
        assert!(v2.results.is_empty() && v2.error_code == 95 && v2.error_message.is_some());
        assert!(answer(&request, 2, 0, String::new()).error_message.is_none());
    }
}
