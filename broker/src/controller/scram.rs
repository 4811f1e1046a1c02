//! SCRAM credential changes (Kafka's `ScramControlManager`): AlterUserScramCredentials sets
//! and removes users' credentials per mechanism. A user named twice for one mechanism, or a
//! deletion of a credential that does not exist, fails that user; the other users' changes
//! are written. The `--add-scram` users a broker brings at start are only added where the
//! cluster has no user of that name.

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;

use crate::metadata::image::MetadataImage;
use crate::metadata::outcome::{ApiError, Outcome};
use crate::metadata::records::{MetadataRecord, ScramCredential, ScramMechanism};

/// User names the brokers keep for themselves (the inter-broker principal): no client may
/// create or change them.
pub const RESERVED_USER_PREFIX: &str = "__sluice";

/// Kafka's iteration bounds for SCRAM-SHA-256 and SCRAM-SHA-512.
pub const MIN_ITERATIONS: u32 = 4096;
pub const MAX_ITERATIONS: u32 = 16384;

fn unacceptable(message: impl Into<String>) -> ApiError {
    ApiError::new(ResponseError::UnacceptableCredential, message)
}

/// The checks that need no image, with Kafka's errors: a name, not a reserved one.
pub fn check_user_name(user: &str) -> Result<(), ApiError> {
    if user.is_empty() {
        return Err(unacceptable("Username must not be empty"));
    }
    if user.starts_with(RESERVED_USER_PREFIX) {
        return Err(unacceptable(format!(
            "user names starting with {RESERVED_USER_PREFIX} are reserved for the brokers; choose another name"
        )));
    }
    Ok(())
}

/// Kafka's iteration bounds.
pub fn check_iterations(iterations: i32) -> Result<u32, ApiError> {
    match u32::try_from(iterations) {
        Ok(n) if n < MIN_ITERATIONS => Err(unacceptable(format!(
            "Too few iterations: {iterations}; use at least {MIN_ITERATIONS}"
        ))),
        Ok(n) if n > MAX_ITERATIONS => Err(unacceptable(format!(
            "Too many iterations: {iterations}; use at most {MAX_ITERATIONS}"
        ))),
        Ok(n) => Ok(n),
        Err(_) => Err(unacceptable(format!("Too few iterations: {iterations}"))),
    }
}

/// Decides an AlterUserScramCredentials: the records, and per user (in the order first named)
/// its error, if any.
pub fn alter_scram_credentials(
    image: &MetadataImage,
    deletions: &[(String, ScramMechanism)],
    upsertions: &[ScramCredential],
    only_if_absent: bool,
) -> (Vec<MetadataRecord>, Outcome) {
    let mut order: Vec<&str> = Vec::new();
    let mut errors: BTreeMap<&str, ApiError> = BTreeMap::new();
    let mut named: Vec<(&str, ScramMechanism)> = Vec::new();
    let all = deletions
        .iter()
        .map(|(u, m)| (u.as_str(), *m))
        .chain(upsertions.iter().map(|c| (c.user.as_str(), c.mechanism)));
    for (user, mechanism) in all {
        if !order.contains(&user) {
            order.push(user);
        }
        if named.contains(&(user, mechanism)) {
            errors.entry(user).or_insert_with(|| {
                ApiError::new(
                    ResponseError::DuplicateResource,
                    "A user credential cannot be altered twice in the same request",
                )
            });
        }
        named.push((user, mechanism));
        if let Err(e) = check_user_name(user) {
            errors.entry(user).or_insert(e);
        }
    }
    for (user, mechanism) in deletions {
        if !image.scram_credentials.contains_key(&(user.clone(), *mechanism)) {
            errors.entry(user.as_str()).or_insert_with(|| {
                ApiError::new(
                    ResponseError::ResourceNotFound,
                    "Attempt to delete a user credential that does not exist",
                )
            });
        }
    }
    let mut records = Vec::new();
    for (user, mechanism) in deletions.iter().filter(|(u, _)| !errors.contains_key(u.as_str())) {
        records.push(MetadataRecord::RemoveScramCredential {
            user: user.clone(),
            mechanism: *mechanism,
        });
    }
    for credential in upsertions.iter().filter(|c| !errors.contains_key(c.user.as_str())) {
        if only_if_absent && image.has_scram_user(&credential.user) {
            continue;
        }
        records.push(MetadataRecord::ScramCredential(credential.clone()));
    }
    let results = order
        .into_iter()
        .map(|user| (user.to_string(), errors.get(user).cloned()))
        .collect();
    (records, Outcome::ScramCredentialsAltered(results))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::test_support::apply_all;

    fn credential(user: &str, mechanism: ScramMechanism) -> ScramCredential {
        ScramCredential {
            user: user.into(),
            mechanism,
            salt: vec![1; 16],
            stored_key: vec![2; 32],
            server_key: vec![3; 32],
            iterations: 4096,
        }
    }

    fn errors(outcome: &Outcome) -> Vec<(String, Option<ResponseError>)> {
        match outcome {
            Outcome::ScramCredentialsAltered(results) => results
                .iter()
                .map(|(u, e)| (u.clone(), e.as_ref().map(|e| e.error)))
                .collect(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn upsertions_and_deletions_apply_per_user() {
        let mut image = MetadataImage::new("c".into());
        let (records, outcome) = alter_scram_credentials(
            &image,
            &[],
            &[
                credential("alice", ScramMechanism::Sha256),
                credential("alice", ScramMechanism::Sha512),
            ],
            false,
        );
        assert_eq!(errors(&outcome), vec![("alice".into(), None)]);
        apply_all(&mut image, &records);
        assert_eq!(image.scram_credentials.len(), 2);
        assert!(image.has_scram_user("alice") && !image.has_scram_user("alic"));

        let (records, outcome) =
            alter_scram_credentials(&image, &[("alice".into(), ScramMechanism::Sha256)], &[], false);
        assert_eq!(errors(&outcome), vec![("alice".into(), None)]);
        apply_all(&mut image, &records);
        assert_eq!(image.scram_credentials.len(), 1);
    }

    #[test]
    fn a_failing_user_leaves_the_others_changed() {
        let image = MetadataImage::new("c".into());
        let (records, outcome) = alter_scram_credentials(
            &image,
            &[("ghost".into(), ScramMechanism::Sha256)],
            &[
                credential("bob", ScramMechanism::Sha256),
                credential("carol", ScramMechanism::Sha512),
                credential("carol", ScramMechanism::Sha512),
                credential("__sluice_broker", ScramMechanism::Sha512),
            ],
            false,
        );
        assert_eq!(
            errors(&outcome),
            vec![
                ("ghost".into(), Some(ResponseError::ResourceNotFound)),
                ("bob".into(), None),
                ("carol".into(), Some(ResponseError::DuplicateResource)),
                ("__sluice_broker".into(), Some(ResponseError::UnacceptableCredential)),
            ]
        );
        assert_eq!(
            records,
            vec![MetadataRecord::ScramCredential(credential(
                "bob",
                ScramMechanism::Sha256
            ))]
        );
    }

    #[test]
    fn only_if_absent_never_replaces_an_existing_user() {
        let mut image = MetadataImage::new("c".into());
        let (records, _) = alter_scram_credentials(&image, &[], &[credential("admin", ScramMechanism::Sha256)], false);
        apply_all(&mut image, &records);
        let (records, _) = alter_scram_credentials(&image, &[], &[credential("admin", ScramMechanism::Sha512)], true);
        assert!(records.is_empty(), "admin exists (with another mechanism): left alone");
        let (records, _) = alter_scram_credentials(&image, &[], &[credential("ops", ScramMechanism::Sha512)], true);
        assert_eq!(records.len(), 1);
    }

    #[test]
    fn iterations_are_bounded_as_in_kafka() {
        assert!(check_iterations(4095).is_err());
        assert!(check_iterations(-1).is_err());
        assert!(check_iterations(16385).is_err());
        assert_eq!(check_iterations(8192).unwrap(), 8192);
    }
}
