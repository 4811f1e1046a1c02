//! AlterUserScramCredentials: set and remove users' SCRAM credentials (what `kafka-configs
//! --alter --add-config 'SCRAM-SHA-256=[password=...]' --entity-type users` sends). The client
//! sends a salt and the salted password; the broker keeps only the stored and server keys
//! derived from them (RFC 5802), in the metadata quorum, so every broker checks the same
//! credentials and they survive restarts. Needs ALTER on the cluster.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::{AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse};

use super::{commit_error, str_bytes, RequestContext};
use crate::controller::acls::CLUSTER_NAME;
use crate::controller::scram::{check_iterations, check_user_name};
use crate::metadata::acls::{AclOperation, ResourceType};
use crate::metadata::outcome::Outcome;
use crate::metadata::records::{MetadataCommand, ScramCredential, ScramMechanism};
use crate::security::scram::credential_from_salted;

/// Salt and salted password sizes accepted (Kafka's clients send 32-byte salts; a salted
/// password is one hash long).
const MAX_SALT_BYTES: usize = 1024;

pub async fn handle(
    ctx: RequestContext,
    request: AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    let RequestContext { broker, session, .. } = ctx;
    let users: Vec<String> = {
        let mut users = Vec::new();
        let names = request
            .deletions
            .iter()
            .map(|d| &d.name)
            .chain(request.upsertions.iter().map(|u| &u.name));
        for name in names {
            if !users.iter().any(|u: &String| u == name.as_str()) {
                users.push(name.to_string());
            }
        }
        users
    };
    let result = |user: &str, error: Option<(i16, String)>| {
        let r = AlterUserScramCredentialsResult::default().with_user(str_bytes(user));
        match error {
            Some((code, message)) => r.with_error_code(code).with_error_message(Some(str_bytes(message))),
            None => r,
        }
    };
    let image = broker.metadata.image();
    if !broker.security.authorizer.authorize(
        &image.acls,
        session.requester(),
        AclOperation::Alter,
        ResourceType::Cluster,
        CLUSTER_NAME,
    ) {
        let refusal = (
            ResponseError::ClusterAuthorizationFailed.code(),
            "altering SCRAM credentials needs ALTER on the cluster".to_string(),
        );
        return AlterUserScramCredentialsResponse::default()
            .with_results(users.iter().map(|u| result(u, Some(refusal.clone()))).collect());
    }
    // Checks that need no image; a user failing one is left out of the command.
    let mut refused: Vec<(String, (i16, String))> = Vec::new();
    let mut refuse = |user: &str, code: ResponseError, message: String| {
        if !refused.iter().any(|(u, _)| u == user) {
            refused.push((user.to_string(), (code.code(), message)));
        }
    };
    let mut deletions = Vec::new();
    for d in &request.deletions {
        match ScramMechanism::from_code(d.mechanism) {
            Some(m) => deletions.push((d.name.to_string(), m)),
            None => refuse(
                &d.name,
                ResponseError::UnsupportedSaslMechanism,
                "Unknown SCRAM mechanism".into(),
            ),
        }
    }
    let mut upsertions: Vec<ScramCredential> = Vec::new();
    for u in &request.upsertions {
        let Some(mechanism) = ScramMechanism::from_code(u.mechanism) else {
            refuse(
                &u.name,
                ResponseError::UnsupportedSaslMechanism,
                "Unknown SCRAM mechanism".into(),
            );
            continue;
        };
        let iterations = match check_iterations(u.iterations) {
            Ok(n) => n,
            Err(e) => {
                refuse(&u.name, e.error, e.message);
                continue;
            }
        };
        if let Err(e) = check_user_name(&u.name) {
            refuse(&u.name, e.error, e.message);
            continue;
        }
        if u.salt.is_empty()
            || u.salt.len() > MAX_SALT_BYTES
            || u.salted_password.is_empty()
            || u.salted_password.len() > 64
        {
            refuse(
                &u.name,
                ResponseError::UnacceptableCredential,
                "the salt and salted password must be given (a salted password is one hash long)".into(),
            );
            continue;
        }
        upsertions.push(credential_from_salted(
            &u.name,
            mechanism,
            u.salt.to_vec(),
            &u.salted_password,
            iterations,
        ));
    }
    let is_refused = |user: &str| refused.iter().any(|(u, _)| u == user);
    deletions.retain(|(user, _)| !is_refused(user));
    upsertions.retain(|c| !is_refused(&c.user));
    let mut decided: Vec<(String, Option<(i16, String)>)> = Vec::new();
    if !deletions.is_empty() || !upsertions.is_empty() {
        match broker
            .commit(MetadataCommand::AlterScramCredentials {
                deletions,
                upsertions,
                only_if_absent: false,
            })
            .await
        {
            Ok((_, Outcome::ScramCredentialsAltered(results))) => {
                decided = results
                    .into_iter()
                    .map(|(user, error)| (user, error.map(|e| (e.code(), e.message))))
                    .collect()
            }
            Ok((_, other)) => tracing::error!(?other, "AlterUserScramCredentials decided with an unexpected outcome"),
            Err(e) => {
                let error = commit_error(&e);
                for user in users.iter().filter(|u| !is_refused(u)) {
                    decided.push((user.clone(), Some(error.clone())));
                }
            }
        }
    }
    let results = users
        .iter()
        .map(|user| {
            let error = refused
                .iter()
                .find(|(u, _)| u == user)
                .map(|(_, e)| e.clone())
                .or_else(|| decided.iter().find(|(u, _)| u == user).and_then(|(_, e)| e.clone()));
            result(user, error)
        })
        .collect();
    AlterUserScramCredentialsResponse::default().with_results(results)
}
