//! DescribeUserScramCredentials: each user's SCRAM mechanisms and iteration counts (never a
//! salt or key), from the metadata image. All users when none is named; a named user without
//! credentials gets RESOURCE_NOT_FOUND, one named twice DUPLICATE_RESOURCE, as in Kafka. Needs
//! DESCRIBE on the cluster. `kafka-configs --describe --entity-type users` asks this.

use std::collections::{BTreeMap, HashSet};

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse};

use super::{str_bytes, RequestContext};
use crate::controller::acls::CLUSTER_NAME;
use crate::controller::scram::RESERVED_USER_PREFIX;
use crate::metadata::acls::{AclOperation, ResourceType};
use crate::metadata::image::MetadataImage;

pub fn handle(
    ctx: &RequestContext,
    request: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    if !broker.security.authorizer.authorize(
        &image.acls,
        session.requester(),
        AclOperation::Describe,
        ResourceType::Cluster,
        CLUSTER_NAME,
    ) {
        return DescribeUserScramCredentialsResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code())
            .with_error_message(Some(str_bytes(
                "describing SCRAM credentials needs DESCRIBE on the cluster",
            )));
    }
    describe(&image, request)
}

fn describe(
    image: &MetadataImage,
    request: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let mut by_user: BTreeMap<&str, Vec<CredentialInfo>> = BTreeMap::new();
    for ((user, mechanism), credential) in &image.scram_credentials {
        by_user.entry(user.as_str()).or_default().push(
            CredentialInfo::default()
                .with_mechanism(*mechanism as i8)
                .with_iterations(i32::try_from(credential.iterations).unwrap_or(i32::MAX)),
        );
    }
    let result = |user: &str, infos: Vec<CredentialInfo>| {
        DescribeUserScramCredentialsResult::default()
            .with_user(str_bytes(user))
            .with_credential_infos(infos)
    };
    let users = request.users.unwrap_or_default();
    if users.is_empty() {
        let all = by_user
            .into_iter()
            .filter(|(user, _)| !user.starts_with(RESERVED_USER_PREFIX))
            .map(|(user, infos)| result(user, infos))
            .collect();
        return DescribeUserScramCredentialsResponse::default().with_results(all);
    }
    let mut seen = HashSet::with_capacity(users.len());
    let results = users
        .iter()
        .map(|user| {
            let name = user.name.as_str();
            if !seen.insert(name) {
                return result(name, Vec::new())
                    .with_error_code(ResponseError::DuplicateResource.code())
                    .with_error_message(Some(str_bytes(
                        "Cannot describe SCRAM credentials for the same user twice in a single request",
                    )));
            }
            match by_user.get(name) {
                Some(infos) => result(name, infos.clone()),
                None => result(name, Vec::new())
                    .with_error_code(ResponseError::ResourceNotFound.code())
                    .with_error_message(Some(str_bytes(
                        "Attempt to describe a user credential that does not exist",
                    ))),
            }
        })
        .collect();
    DescribeUserScramCredentialsResponse::default().with_results(results)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::records::{MetadataRecord, ScramCredential, ScramMechanism};
    use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;

    fn image_with(users: &[(&str, ScramMechanism, u32)]) -> MetadataImage {
        let mut image = MetadataImage::new("c".into());
        for (user, mechanism, iterations) in users {
            image.apply(&MetadataRecord::ScramCredential(ScramCredential {
                user: user.to_string(),
                mechanism: *mechanism,
                salt: vec![1],
                stored_key: vec![2],
                server_key: vec![3],
                iterations: *iterations,
            }));
        }
        image
    }

    #[test]
    fn all_users_are_listed_with_their_mechanisms_and_named_unknown_users_are_not_found() {
        let image = image_with(&[
            ("alice", ScramMechanism::Sha256, 4096),
            ("alice", ScramMechanism::Sha512, 8192),
            ("bob", ScramMechanism::Sha512, 4096),
        ]);
        let all = describe(&image, DescribeUserScramCredentialsRequest::default().with_users(None));
        assert_eq!(all.results.len(), 2);
        assert_eq!(all.results[0].credential_infos.len(), 2);
        assert_eq!(all.results[0].credential_infos[1].iterations, 8192);
        let name = |n: &str| UserName::default().with_name(str_bytes(n));
        let request = DescribeUserScramCredentialsRequest::default().with_users(Some(vec![
            name("bob"),
            name("carol"),
            name("bob"),
        ]));
        let codes: Vec<i16> = describe(&image, request).results.iter().map(|r| r.error_code).collect();
        assert_eq!(
            codes,
            vec![
                0,
                ResponseError::ResourceNotFound.code(),
                ResponseError::DuplicateResource.code()
            ]
        );
    }
}
