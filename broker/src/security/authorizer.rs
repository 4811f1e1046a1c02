//! The authorizer (Kafka's `StandardAuthorizer`), on when `authorizer.class.name` is set:
//!
//! - super users (`super.users`, and the brokers' own principal) may do everything;
//! - a DENY binding matching the principal (or `User:*`), host (or `*`) and operation (or
//!   ALL) refuses, whatever allows;
//! - else an ALLOW binding of the operation, of ALL, or of one implying it (READ, WRITE,
//!   DELETE, ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS) allows;
//! - else, if no binding at all covers the resource, `allow.everyone.if.no.acl.found` decides
//!   (false by default: deny by default); otherwise it is refused.
//!
//! Bindings covering a resource are its LITERAL name, the LITERAL `*`, and PREFIXED prefixes of
//! the name. Refusals of what a client asked for are logged under the target `authorizer` at
//! debug (turn them on with `RUST_LOG=info,authorizer=debug`), as Kafka's authorizer logger.
//! Without an authorizer everything is allowed and the checks cost one branch.

use std::collections::HashSet;

use crate::config::security::AuthorizerSettings;
use crate::metadata::acls::{AclOperation, AclPermission, AclTable, ResourceType, WILDCARD_HOST, WILDCARD_PRINCIPAL};

/// Who is asking and from where.
#[derive(Debug, Clone, Copy)]
pub struct Requester<'a> {
    /// `User:alice`.
    pub principal: &'a str,
    /// The client's IP address as text.
    pub host: &'a str,
}

pub struct Authorizer {
    settings: Option<Settings>,
}

struct Settings {
    super_users: HashSet<String>,
    allow_everyone_if_no_acl_found: bool,
}

impl Authorizer {
    pub fn new(settings: Option<&AuthorizerSettings>) -> Authorizer {
        Authorizer {
            settings: settings.map(|s| Settings {
                super_users: s.super_users.iter().cloned().collect(),
                allow_everyone_if_no_acl_found: s.allow_everyone_if_no_acl_found,
            }),
        }
    }

    /// No authorizer: everything is allowed.
    pub fn disabled() -> Authorizer {
        Authorizer { settings: None }
    }

    pub fn is_enabled(&self) -> bool {
        self.settings.is_some()
    }

    fn is_super(settings: &Settings, principal: &str) -> bool {
        principal == super::BROKER_PRINCIPAL || settings.super_users.contains(principal)
    }

    /// Whether `who` may perform `operation` on the resource; a refusal is logged.
    pub fn authorize(
        &self,
        acls: &AclTable,
        who: Requester<'_>,
        operation: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        let allowed = self.check(acls, who, operation, resource_type, name);
        if !allowed {
            tracing::debug!(target: "authorizer",
                principal = who.principal, host = who.host, operation = operation.name(),
                resource = %format_args!("{}:LITERAL:{name}", resource_type.name()),
                "Principal = {} is Denied operation = {} from host = {} on resource = {}:LITERAL:{name}",
                who.principal, operation.name(), who.host, resource_type.name());
        }
        allowed
    }

    /// The same check without logging a refusal: for filtering what a listing shows (topics
    /// in Metadata for all topics, groups in ListGroups) and for authorized-operations fields.
    pub fn check(
        &self,
        acls: &AclTable,
        who: Requester<'_>,
        operation: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        let Some(settings) = &self.settings else { return true };
        if Self::is_super(settings, who.principal) {
            return true;
        }
        let mut covered = false;
        let mut allowed = false;
        for acl in acls.covering(resource_type, name) {
            covered = true;
            let principal_matches = acl.principal == who.principal || acl.principal == WILDCARD_PRINCIPAL;
            let host_matches = acl.host == WILDCARD_HOST || acl.host == who.host;
            if !(principal_matches && host_matches) {
                continue;
            }
            match acl.permission {
                AclPermission::Deny if acl.operation == AclOperation::All || acl.operation == operation => {
                    return false
                }
                AclPermission::Deny => {}
                AclPermission::Allow => allowed |= acl.operation.allow_implies(operation),
            }
        }
        allowed || (!covered && settings.allow_everyone_if_no_acl_found)
    }

    /// Kafka's `authorizeByResourceType`: whether `who` may perform `operation` on at least
    /// one resource of the type (KIP-679: WRITE on any topic allows idempotent producing). An
    /// ALLOW binding counts unless a DENY of the same operation covers every name it covers.
    pub fn check_any(
        &self,
        acls: &AclTable,
        who: Requester<'_>,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool {
        let Some(settings) = &self.settings else { return true };
        if Self::is_super(settings, who.principal) {
            return true;
        }
        let matching: Vec<_> = acls
            .of_type(resource_type)
            .filter(|acl| acl.principal == who.principal || acl.principal == WILDCARD_PRINCIPAL)
            .filter(|acl| acl.host == WILDCARD_HOST || acl.host == who.host)
            .collect();
        let denies = |name: &str, prefixed: bool| {
            matching.iter().any(|d| {
                d.permission == AclPermission::Deny
                    && (d.operation == AclOperation::All || d.operation == operation)
                    && match d.pattern_type {
                        crate::metadata::acls::PatternType::Literal => {
                            d.resource_name == crate::metadata::acls::WILDCARD_RESOURCE
                                || (!prefixed && d.resource_name == name)
                        }
                        crate::metadata::acls::PatternType::Prefixed => name.starts_with(d.resource_name.as_str()),
                    }
            })
        };
        let allowed = matching.iter().any(|a| {
            a.permission == AclPermission::Allow
                && a.operation.allow_implies(operation)
                && !denies(
                    &a.resource_name,
                    a.pattern_type == crate::metadata::acls::PatternType::Prefixed,
                )
        });
        allowed || (settings.allow_everyone_if_no_acl_found && acls.of_type(resource_type).next().is_none())
    }

    /// KIP-430's authorized-operations bit field: bit `code` set for each operation of the
    /// resource type that `who` may perform (every supported one without an authorizer).
    pub fn authorized_operations(
        &self,
        acls: &AclTable,
        who: Requester<'_>,
        resource_type: ResourceType,
        name: &str,
    ) -> i32 {
        supported_operations(resource_type)
            .iter()
            .filter(|op| self.check(acls, who, **op, resource_type, name))
            .fold(0i32, |bits, op| bits | (1 << (*op as i32)))
    }
}

/// Kafka's `AclEntry.supportedOperations`.
pub fn supported_operations(resource_type: ResourceType) -> &'static [AclOperation] {
    use AclOperation::*;
    match resource_type {
        ResourceType::Topic => &[
            Read,
            Write,
            Create,
            Describe,
            Delete,
            Alter,
            DescribeConfigs,
            AlterConfigs,
        ],
        ResourceType::Group => &[Read, Describe, Delete, DescribeConfigs, AlterConfigs],
        ResourceType::Cluster => &[
            Create,
            ClusterAction,
            DescribeConfigs,
            AlterConfigs,
            IdempotentWrite,
            Alter,
            Describe,
        ],
        ResourceType::TransactionalId => &[Describe, Write],
        ResourceType::DelegationToken => &[Describe],
        ResourceType::User => &[CreateTokens, DescribeTokens],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::acls::{AclBinding, PatternType};
    use uuid::Uuid;

    fn binding(
        name: &str,
        pattern: PatternType,
        principal: &str,
        operation: AclOperation,
        permission: AclPermission,
    ) -> AclBinding {
        AclBinding {
            resource_type: ResourceType::Topic,
            resource_name: name.into(),
            pattern_type: pattern,
            principal: principal.into(),
            host: "*".into(),
            operation,
            permission,
        }
    }

    fn table(bindings: Vec<AclBinding>) -> AclTable {
        let mut t = AclTable::default();
        for (i, b) in bindings.into_iter().enumerate() {
            t.insert(Uuid::from_u128(i as u128 + 1), b);
        }
        t
    }

    fn authorizer(super_users: &[&str], allow_if_no_acl: bool) -> Authorizer {
        Authorizer::new(Some(&AuthorizerSettings {
            super_users: super_users.iter().map(|s| s.to_string()).collect(),
            allow_everyone_if_no_acl_found: allow_if_no_acl,
        }))
    }

    const ALICE: Requester<'static> = Requester {
        principal: "User:alice",
        host: "10.0.0.1",
    };

    #[test]
    fn deny_by_default_and_allow_by_acl() {
        let acls = table(vec![binding(
            "orders",
            PatternType::Literal,
            "User:alice",
            AclOperation::Read,
            AclPermission::Allow,
        )]);
        let auth = authorizer(&[], false);
        assert!(auth.check(&acls, ALICE, AclOperation::Read, ResourceType::Topic, "orders"));
        assert!(
            auth.check(&acls, ALICE, AclOperation::Describe, ResourceType::Topic, "orders"),
            "READ implies DESCRIBE"
        );
        assert!(!auth.check(&acls, ALICE, AclOperation::Write, ResourceType::Topic, "orders"));
        assert!(!auth.check(&acls, ALICE, AclOperation::Read, ResourceType::Topic, "payments"));
        let bob = Requester {
            principal: "User:bob",
            host: "10.0.0.1",
        };
        assert!(!auth.check(&acls, bob, AclOperation::Read, ResourceType::Topic, "orders"));
    }

    #[test]
    fn deny_beats_allow_and_does_not_imply() {
        let acls = table(vec![
            binding(
                "*",
                PatternType::Literal,
                "User:*",
                AclOperation::All,
                AclPermission::Allow,
            ),
            binding(
                "secret",
                PatternType::Prefixed,
                "User:alice",
                AclOperation::Read,
                AclPermission::Deny,
            ),
        ]);
        let auth = authorizer(&[], false);
        assert!(auth.check(&acls, ALICE, AclOperation::Write, ResourceType::Topic, "orders"));
        assert!(!auth.check(&acls, ALICE, AclOperation::Read, ResourceType::Topic, "secret-plans"));
        assert!(
            auth.check(
                &acls,
                ALICE,
                AclOperation::Describe,
                ResourceType::Topic,
                "secret-plans"
            ),
            "a DENY of READ leaves DESCRIBE"
        );
    }

    #[test]
    fn prefixed_acls_cover_names_that_start_with_them() {
        let acls = table(vec![binding(
            "orders-",
            PatternType::Prefixed,
            "User:alice",
            AclOperation::Write,
            AclPermission::Allow,
        )]);
        let auth = authorizer(&[], false);
        assert!(auth.check(&acls, ALICE, AclOperation::Write, ResourceType::Topic, "orders-eu"));
        assert!(!auth.check(&acls, ALICE, AclOperation::Write, ResourceType::Topic, "orders"));
    }

    #[test]
    fn hosts_must_match_unless_the_acl_says_any() {
        let mut b = binding(
            "orders",
            PatternType::Literal,
            "User:alice",
            AclOperation::Read,
            AclPermission::Allow,
        );
        b.host = "10.0.0.2".into();
        let acls = table(vec![b]);
        assert!(!authorizer(&[], false).check(&acls, ALICE, AclOperation::Read, ResourceType::Topic, "orders"));
    }

    #[test]
    fn super_users_and_brokers_may_do_everything() {
        let acls = table(vec![binding(
            "*",
            PatternType::Literal,
            "User:*",
            AclOperation::All,
            AclPermission::Deny,
        )]);
        let auth = authorizer(&["User:alice"], false);
        assert!(auth.check(&acls, ALICE, AclOperation::Delete, ResourceType::Topic, "orders"));
        let broker = Requester {
            principal: crate::security::BROKER_PRINCIPAL,
            host: "10.0.0.9",
        };
        assert!(auth.check(
            &acls,
            broker,
            AclOperation::ClusterAction,
            ResourceType::Cluster,
            "kafka-cluster"
        ));
    }

    #[test]
    fn allow_everyone_if_no_acl_found_applies_only_to_resources_no_acl_covers() {
        let acls = table(vec![binding(
            "orders",
            PatternType::Literal,
            "User:bob",
            AclOperation::Read,
            AclPermission::Allow,
        )]);
        let auth = authorizer(&[], true);
        assert!(auth.check(&acls, ALICE, AclOperation::Read, ResourceType::Topic, "payments"));
        assert!(!auth.check(&acls, ALICE, AclOperation::Read, ResourceType::Topic, "orders"));
    }

    #[test]
    fn write_on_any_topic_is_found_unless_denied_everywhere_it_applies() {
        let auth = authorizer(&[], false);
        let acls = table(vec![binding(
            "orders",
            PatternType::Literal,
            "User:alice",
            AclOperation::Write,
            AclPermission::Allow,
        )]);
        assert!(auth.check_any(&acls, ALICE, AclOperation::Write, ResourceType::Topic));
        let acls = table(vec![
            binding(
                "orders",
                PatternType::Literal,
                "User:alice",
                AclOperation::Write,
                AclPermission::Allow,
            ),
            binding(
                "ord",
                PatternType::Prefixed,
                "User:alice",
                AclOperation::Write,
                AclPermission::Deny,
            ),
        ]);
        assert!(!auth.check_any(&acls, ALICE, AclOperation::Write, ResourceType::Topic));
        assert!(!auth.check_any(&AclTable::default(), ALICE, AclOperation::Write, ResourceType::Topic));
    }

    #[test]
    fn authorized_operations_set_one_bit_per_allowed_operation() {
        let acls = table(vec![binding(
            "orders",
            PatternType::Literal,
            "User:alice",
            AclOperation::Read,
            AclPermission::Allow,
        )]);
        let bits = authorizer(&[], false).authorized_operations(&acls, ALICE, ResourceType::Topic, "orders");
        assert_eq!(bits, (1 << 3) | (1 << 8), "READ and the DESCRIBE it implies");
        let all = Authorizer::disabled().authorized_operations(&acls, ALICE, ResourceType::Group, "g");
        assert_eq!(all, (1 << 3) | (1 << 8) | (1 << 6) | (1 << 10) | (1 << 11));
    }
}
