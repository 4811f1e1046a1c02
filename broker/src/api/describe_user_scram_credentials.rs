//! DescribeUserScramCredentials: Sluice has no SASL, so no user has SCRAM credentials. Kafka's
//! answer for that state: describing all users lists none; each named user gets
//! RESOURCE_NOT_FOUND (DUPLICATE_RESOURCE when named twice). `kafka-configs --describe
//! --entity-type users` asks this beside DescribeClientQuotas, so answering it lets the tool
//! show user quotas.

use std::collections::HashSet;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_user_scram_credentials_response::DescribeUserScramCredentialsResult;
use kafka_protocol::messages::{DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse};

use super::str_bytes;

pub fn handle(request: DescribeUserScramCredentialsRequest) -> DescribeUserScramCredentialsResponse {
    let users = request.users.unwrap_or_default();
    let mut seen = HashSet::with_capacity(users.len());
    let results = users
        .iter()
        .map(|user| {
            let (error, message) = if seen.insert(&user.name) {
                (
                    ResponseError::ResourceNotFound,
                    "Attempt to describe a user credential that does not exist: this broker has no SASL/SCRAM users",
                )
            } else {
                (
                    ResponseError::DuplicateResource,
                    "Cannot describe SCRAM credentials for the same user twice in a single request",
                )
            };
            DescribeUserScramCredentialsResult::default()
                .with_user(user.name.clone())
                .with_error_code(error.code())
                .with_error_message(Some(str_bytes(message)))
        })
        .collect();
    DescribeUserScramCredentialsResponse::default().with_results(results)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;

    #[test]
    fn all_users_lists_none_and_named_users_are_not_found() {
        assert!(handle(DescribeUserScramCredentialsRequest::default().with_users(None))
            .results
            .is_empty());
        let alice = UserName::default().with_name(str_bytes("alice"));
        let request = DescribeUserScramCredentialsRequest::default().with_users(Some(vec![alice.clone(), alice]));
        let codes: Vec<i16> = handle(request).results.iter().map(|r| r.error_code).collect();
        assert_eq!(
            codes,
            vec![
                ResponseError::ResourceNotFound.code(),
                ResponseError::DuplicateResource.code()
            ]
        );
    }
}
