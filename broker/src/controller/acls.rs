//! ACL changes (Kafka's `AclControlManager`): CreateAcls adds bindings (one already present
//! is not added twice), DeleteAcls removes every binding a filter matches and reports them per
//! filter. Bindings are checked as Kafka checks them before anything is written.

use std::collections::BTreeSet;

use kafka_protocol::error::ResponseError;
use uuid::Uuid;

use crate::metadata::acls::{AclBinding, AclFilter, ResourceType, WILDCARD_HOST};
use crate::metadata::image::MetadataImage;
use crate::metadata::outcome::{ApiError, Outcome};
use crate::metadata::records::MetadataRecord;

/// Kafka's name of the one cluster resource.
pub const CLUSTER_NAME: &str = "kafka-cluster";

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(ResponseError::InvalidRequest, message)
}

/// Kafka's `AclControlManager.validateNewAcl` and the checks its request handling makes.
pub fn check_new_acl(acl: &AclBinding) -> Result<(), ApiError> {
    if acl.resource_name.is_empty() {
        return Err(invalid("Resource name should not be empty"));
    }
    if acl.resource_type == ResourceType::Cluster && acl.resource_name != CLUSTER_NAME {
        return Err(invalid(format!(
            "The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
        )));
    }
    match acl.principal.split_once(':') {
        Some((kind, name)) if !kind.is_empty() && !name.is_empty() => {}
        _ => {
            return Err(invalid(format!(
                "Could not parse principal from `{}` (no colon is present separating the principal type from the principal name)",
                acl.principal
            )))
        }
    }
    if acl.host.is_empty() {
        return Err(invalid(format!("the host must be an IP address or {WILDCARD_HOST}")));
    }
    Ok(())
}

/// Decides a CreateAcls: a record for each binding not already present (checked again, since
/// the command could come from any broker).
pub fn create_acls(image: &MetadataImage, acls: &[(Uuid, AclBinding)]) -> Result<Vec<MetadataRecord>, ApiError> {
    let mut seen = BTreeSet::new();
    let mut records = Vec::new();
    for (id, binding) in acls {
        check_new_acl(binding)?;
        if image.acls.contains(binding) || !seen.insert(binding) {
            continue;
        }
        records.push(MetadataRecord::Acl {
            id: *id,
            binding: binding.clone(),
        });
    }
    Ok(records)
}

/// Decides a DeleteAcls: every binding any filter matches goes, each reported under every
/// filter that matched it, as Kafka reports them.
pub fn delete_acls(image: &MetadataImage, filters: &[AclFilter]) -> (Vec<MetadataRecord>, Outcome) {
    let mut removed = BTreeSet::new();
    let mut per_filter = Vec::with_capacity(filters.len());
    for filter in filters {
        let mut matched = Vec::new();
        for (id, binding) in image.acls.iter().filter(|(_, b)| filter.matches(b)) {
            removed.insert(*id);
            matched.push(binding.clone());
        }
        per_filter.push(matched);
    }
    let records = removed.into_iter().map(|id| MetadataRecord::RemoveAcl { id }).collect();
    (records, Outcome::AclsDeleted(per_filter))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::test_support::apply_all;
    use crate::metadata::acls::{AclOperation, AclPermission, PatternFilter, PatternType};

    fn binding(name: &str, operation: AclOperation) -> AclBinding {
        AclBinding {
            resource_type: ResourceType::Topic,
            resource_name: name.into(),
            pattern_type: PatternType::Literal,
            principal: "User:alice".into(),
            host: "*".into(),
            operation,
            permission: AclPermission::Allow,
        }
    }

    #[test]
    fn creating_an_acl_twice_stores_it_once() {
        let mut image = MetadataImage::new("c".into());
        let acl = binding("orders", AclOperation::Read);
        let records = create_acls(
            &image,
            &[(Uuid::from_u128(1), acl.clone()), (Uuid::from_u128(2), acl.clone())],
        )
        .unwrap();
        assert_eq!(records.len(), 1);
        apply_all(&mut image, &records);
        assert!(create_acls(&image, &[(Uuid::from_u128(3), acl)]).unwrap().is_empty());
        assert_eq!(image.acls.len(), 1);
    }

    #[test]
    fn malformed_bindings_are_refused() {
        let image = MetadataImage::new("c".into());
        let mut no_colon = binding("orders", AclOperation::Read);
        no_colon.principal = "alice".into();
        assert_eq!(
            create_acls(&image, &[(Uuid::nil(), no_colon)]).unwrap_err().error,
            ResponseError::InvalidRequest
        );
        let mut cluster = binding("other", AclOperation::Alter);
        cluster.resource_type = ResourceType::Cluster;
        assert!(create_acls(&image, &[(Uuid::nil(), cluster)]).is_err());
        assert!(create_acls(&image, &[(Uuid::nil(), binding("", AclOperation::Read))]).is_err());
    }

    #[test]
    fn delete_reports_what_each_filter_matched() {
        let mut image = MetadataImage::new("c".into());
        let acls = [
            (Uuid::from_u128(1), binding("orders", AclOperation::Read)),
            (Uuid::from_u128(2), binding("orders", AclOperation::Write)),
            (Uuid::from_u128(3), binding("payments", AclOperation::Read)),
        ];
        let records = create_acls(&image, &acls).unwrap();
        apply_all(&mut image, &records);
        let by_name = |name: &str| AclFilter {
            resource_type: Some(ResourceType::Topic),
            resource_name: Some(name.into()),
            pattern: PatternFilter::Exactly(PatternType::Literal),
            principal: None,
            host: None,
            operation: None,
            permission: None,
        };
        let (records, outcome) = delete_acls(&image, &[by_name("orders"), by_name("nothing")]);
        let Outcome::AclsDeleted(per_filter) = outcome else {
            panic!()
        };
        assert_eq!((per_filter[0].len(), per_filter[1].len()), (2, 0));
        apply_all(&mut image, &records);
        assert_eq!(image.acls.len(), 1);
    }
}
