//! Test support for the handlers' authorization: an authorizer that denies by default (as
//! Kafka's does without `allow.everyone.if.no.acl.found`) and the ACLs a test grants.

use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::Encodable;
use uuid::Uuid;

use super::Access;
use crate::config::security::AuthorizerSettings;
use crate::metadata::acls::{AclBinding, AclOperation, AclPermission, AclTable, PatternType, ResourceType};
use crate::security::authorizer::{Authorizer, Requester};

/// The principal every test asks as.
pub const ALICE: Requester<'static> = Requester {
    principal: "User:alice",
    host: "10.0.0.1",
};

pub struct Acls {
    authorizer: Authorizer,
    table: AclTable,
}

impl Acls {
    /// An authorizer on, and no ACL: ALICE may do nothing.
    pub fn none() -> Acls {
        Acls {
            authorizer: Authorizer::new(Some(&AuthorizerSettings {
                super_users: Vec::new(),
                allow_everyone_if_no_acl_found: false,
            })),
            table: AclTable::default(),
        }
    }

    /// No authorizer: everything is allowed.
    pub fn disabled() -> Acls {
        Acls {
            authorizer: Authorizer::disabled(),
            table: AclTable::default(),
        }
    }

    /// ALICE may perform `operation` on the named resource (LITERAL).
    pub fn allow(self, resource_type: ResourceType, name: &str, operation: AclOperation) -> Acls {
        self.bind(resource_type, name, operation, AclPermission::Allow)
    }

    /// ALICE may not perform `operation` on the named resource, whatever else allows it.
    pub fn deny(self, resource_type: ResourceType, name: &str, operation: AclOperation) -> Acls {
        self.bind(resource_type, name, operation, AclPermission::Deny)
    }

    /// `allow` on the cluster.
    pub fn allow_cluster(self, operation: AclOperation) -> Acls {
        self.allow(ResourceType::Cluster, crate::controller::acls::CLUSTER_NAME, operation)
    }

    fn bind(
        mut self,
        resource_type: ResourceType,
        name: &str,
        operation: AclOperation,
        permission: AclPermission,
    ) -> Acls {
        let id = Uuid::from_u128(self.table.len() as u128 + 1);
        self.table.insert(
            id,
            AclBinding {
                resource_type,
                resource_name: name.to_string(),
                pattern_type: PatternType::Literal,
                principal: ALICE.principal.to_string(),
                host: "*".to_string(),
                operation,
                permission,
            },
        );
        self
    }

    pub fn access(&self) -> Access<'_> {
        Access::new(&self.authorizer, &self.table, ALICE)
    }
}

/// Panics unless `response` encodes at every version of `api` Sluice advertises: the crate
/// refuses a field set that a version lacks, so a refusal must fill in only what each has.
pub fn assert_encodes_at_every_version<R: Encodable>(api: ApiKey, response: impl Fn(i16) -> R) {
    let range = sluice_protocol::versions::supported_versions(api).expect("advertised");
    for version in range.min..=range.max {
        let mut buf = bytes::BytesMut::new();
        if let Err(e) = response(version).encode(&mut buf, version) {
            panic!("{api:?} v{version}: the refusal does not encode: {e}");
        }
    }
}
