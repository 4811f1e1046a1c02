//! ACLs as Kafka defines them: a binding of a resource pattern (type, name, LITERAL or
//! PREFIXED) to an access control entry (principal, host, operation, ALLOW or DENY), the
//! filters DescribeAcls and DeleteAcls select them with, and [`AclTable`], the applied set the
//! image keeps, indexed for the authorizer's lookups. The wire codes are Kafka's.

use std::collections::{BTreeMap, HashMap};

use uuid::Uuid;

/// Kafka's `ResourceType` codes (UNKNOWN 0 and ANY 1 are filter values only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResourceType {
    Topic = 2,
    Group = 3,
    Cluster = 4,
    TransactionalId = 5,
    DelegationToken = 6,
    User = 7,
}

impl ResourceType {
    pub fn from_code(code: i8) -> Option<ResourceType> {
        Some(match code {
            2 => ResourceType::Topic,
            3 => ResourceType::Group,
            4 => ResourceType::Cluster,
            5 => ResourceType::TransactionalId,
            6 => ResourceType::DelegationToken,
            7 => ResourceType::User,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            ResourceType::Topic => "Topic",
            ResourceType::Group => "Group",
            ResourceType::Cluster => "Cluster",
            ResourceType::TransactionalId => "TransactionalId",
            ResourceType::DelegationToken => "DelegationToken",
            ResourceType::User => "User",
        }
    }
}

/// Kafka's `PatternType` for stored bindings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PatternType {
    Literal = 3,
    Prefixed = 4,
}

impl PatternType {
    pub fn from_code(code: i8) -> Option<PatternType> {
        match code {
            3 => Some(PatternType::Literal),
            4 => Some(PatternType::Prefixed),
            _ => None,
        }
    }
}

/// Kafka's `AclOperation` codes (UNKNOWN 0 and ANY 1 are filter values only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AclOperation {
    All = 2,
    Read = 3,
    Write = 4,
    Create = 5,
    Delete = 6,
    Alter = 7,
    Describe = 8,
    ClusterAction = 9,
    DescribeConfigs = 10,
    AlterConfigs = 11,
    IdempotentWrite = 12,
    CreateTokens = 13,
    DescribeTokens = 14,
    TwoPhaseCommit = 15,
}

impl AclOperation {
    pub fn from_code(code: i8) -> Option<AclOperation> {
        use AclOperation::*;
        Some(match code {
            2 => All,
            3 => Read,
            4 => Write,
            5 => Create,
            6 => Delete,
            7 => Alter,
            8 => Describe,
            9 => ClusterAction,
            10 => DescribeConfigs,
            11 => AlterConfigs,
            12 => IdempotentWrite,
            13 => CreateTokens,
            14 => DescribeTokens,
            15 => TwoPhaseCommit,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        use AclOperation::*;
        match self {
            All => "ALL",
            Read => "READ",
            Write => "WRITE",
            Create => "CREATE",
            Delete => "DELETE",
            Alter => "ALTER",
            Describe => "DESCRIBE",
            ClusterAction => "CLUSTER_ACTION",
            DescribeConfigs => "DESCRIBE_CONFIGS",
            AlterConfigs => "ALTER_CONFIGS",
            IdempotentWrite => "IDEMPOTENT_WRITE",
            CreateTokens => "CREATE_TOKENS",
            DescribeTokens => "DESCRIBE_TOKENS",
            TwoPhaseCommit => "TWO_PHASE_COMMIT",
        }
    }

    /// Whether an ALLOW of `self` also allows `wanted`: itself, and (Kafka's implied
    /// operations) READ, WRITE, DELETE and ALTER allow DESCRIBE, ALTER_CONFIGS allows
    /// DESCRIBE_CONFIGS. A DENY implies nothing beyond its own operation.
    pub fn allow_implies(self, wanted: AclOperation) -> bool {
        use AclOperation::*;
        self == All
            || self == wanted
            || (wanted == Describe && matches!(self, Read | Write | Delete | Alter))
            || (wanted == DescribeConfigs && self == AlterConfigs)
    }
}

/// Kafka's `AclPermissionType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AclPermission {
    Deny = 2,
    Allow = 3,
}

impl AclPermission {
    pub fn from_code(code: i8) -> Option<AclPermission> {
        match code {
            2 => Some(AclPermission::Deny),
            3 => Some(AclPermission::Allow),
            _ => None,
        }
    }
}

/// The literal resource name that matches every resource of its type.
pub const WILDCARD_RESOURCE: &str = "*";
/// The principal (`User:*`) and host (`*`) that match every principal and host.
pub const WILDCARD_PRINCIPAL: &str = "User:*";
pub const WILDCARD_HOST: &str = "*";

/// One ACL (Kafka's `AclBinding`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AclBinding {
    pub resource_type: ResourceType,
    pub resource_name: String,
    pub pattern_type: PatternType,
    /// `Type:name`, e.g. `User:alice`, or `User:*`.
    pub principal: String,
    /// An IP address, or `*`.
    pub host: String,
    pub operation: AclOperation,
    pub permission: AclPermission,
}

impl AclBinding {
    /// Whether this binding's resource pattern covers the named resource.
    pub fn covers(&self, name: &str) -> bool {
        match self.pattern_type {
            PatternType::Literal => self.resource_name == name || self.resource_name == WILDCARD_RESOURCE,
            PatternType::Prefixed => name.starts_with(self.resource_name.as_str()),
        }
    }
}

/// How a filter selects by resource pattern (Kafka's `PatternType` in a filter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatternFilter {
    /// Any pattern type; a given name must equal the binding's name.
    Any,
    /// Every binding that would apply to the named resource: LITERAL with that name or `*`,
    /// PREFIXED with a prefix of it.
    Match,
    Exactly(PatternType),
}

impl PatternFilter {
    pub fn from_code(code: i8) -> Option<PatternFilter> {
        match code {
            1 => Some(PatternFilter::Any),
            2 => Some(PatternFilter::Match),
            _ => PatternType::from_code(code).map(PatternFilter::Exactly),
        }
    }
}

/// Kafka's `AclBindingFilter`: `None` is ANY (or a null name, principal or host).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclFilter {
    pub resource_type: Option<ResourceType>,
    pub resource_name: Option<String>,
    pub pattern: PatternFilter,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: Option<AclOperation>,
    pub permission: Option<AclPermission>,
}

impl AclFilter {
    /// Kafka's `AclBindingFilter.matches`.
    pub fn matches(&self, acl: &AclBinding) -> bool {
        if self.resource_type.is_some_and(|t| t != acl.resource_type) {
            return false;
        }
        let pattern_ok = match self.pattern {
            PatternFilter::Any | PatternFilter::Match => true,
            PatternFilter::Exactly(t) => t == acl.pattern_type,
        };
        if !pattern_ok {
            return false;
        }
        if let Some(name) = &self.resource_name {
            let name_ok = match self.pattern {
                PatternFilter::Any | PatternFilter::Exactly(_) => *name == acl.resource_name,
                PatternFilter::Match => acl.covers(name),
            };
            if !name_ok {
                return false;
            }
        }
        self.principal.as_ref().is_none_or(|p| *p == acl.principal)
            && self.host.as_ref().is_none_or(|h| *h == acl.host)
            && self.operation.is_none_or(|o| o == acl.operation)
            && self.permission.is_none_or(|p| p == acl.permission)
    }
}

/// The applied ACLs by id, with an index by resource type and name for the authorizer: each
/// lookup touches the literal bindings of the name and of `*`, and the type's prefixed
/// bindings (few in practice; Kafka scans a sorted set the same way).
#[derive(Debug, Clone, Default)]
pub struct AclTable {
    by_id: BTreeMap<Uuid, AclBinding>,
    literal: HashMap<ResourceType, HashMap<String, Vec<Uuid>>>,
    prefixed: HashMap<ResourceType, Vec<Uuid>>,
}

impl PartialEq for AclTable {
    fn eq(&self, other: &Self) -> bool {
        self.by_id == other.by_id
    }
}

impl Eq for AclTable {}

impl AclTable {
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Uuid, &AclBinding)> {
        self.by_id.iter()
    }

    pub fn contains(&self, binding: &AclBinding) -> bool {
        self.by_id.values().any(|b| b == binding)
    }

    pub fn insert(&mut self, id: Uuid, binding: AclBinding) {
        self.remove(&id);
        match binding.pattern_type {
            PatternType::Literal => self
                .literal
                .entry(binding.resource_type)
                .or_default()
                .entry(binding.resource_name.clone())
                .or_default()
                .push(id),
            PatternType::Prefixed => self.prefixed.entry(binding.resource_type).or_default().push(id),
        }
        self.by_id.insert(id, binding);
    }

    pub fn remove(&mut self, id: &Uuid) -> Option<AclBinding> {
        let binding = self.by_id.remove(id)?;
        match binding.pattern_type {
            PatternType::Literal => {
                if let Some(names) = self.literal.get_mut(&binding.resource_type) {
                    if let Some(ids) = names.get_mut(&binding.resource_name) {
                        ids.retain(|i| i != id);
                        if ids.is_empty() {
                            names.remove(&binding.resource_name);
                        }
                    }
                }
            }
            PatternType::Prefixed => {
                if let Some(ids) = self.prefixed.get_mut(&binding.resource_type) {
                    ids.retain(|i| i != id);
                }
            }
        }
        Some(binding)
    }

    /// Every binding whose resource pattern covers the resource `(resource_type, name)`.
    pub fn covering<'a>(&'a self, resource_type: ResourceType, name: &'a str) -> impl Iterator<Item = &'a AclBinding> {
        let literal = self.literal.get(&resource_type);
        let named = literal.and_then(|m| m.get(name)).into_iter().flatten();
        let wildcard = literal
            .filter(|_| name != WILDCARD_RESOURCE)
            .and_then(|m| m.get(WILDCARD_RESOURCE))
            .into_iter()
            .flatten();
        let prefixed = self
            .prefixed
            .get(&resource_type)
            .into_iter()
            .flatten()
            .filter(move |id| {
                self.by_id
                    .get(*id)
                    .is_some_and(|b| name.starts_with(b.resource_name.as_str()))
            });
        named
            .chain(wildcard)
            .chain(prefixed)
            .filter_map(|id| self.by_id.get(id))
    }

    /// Every binding of a resource type (for checks "on any resource of this type").
    pub fn of_type(&self, resource_type: ResourceType) -> impl Iterator<Item = &AclBinding> {
        self.by_id.values().filter(move |b| b.resource_type == resource_type)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(resource_type: ResourceType, name: &str, pattern: PatternType, operation: AclOperation) -> AclBinding {
        AclBinding {
            resource_type,
            resource_name: name.into(),
            pattern_type: pattern,
            principal: "User:alice".into(),
            host: "*".into(),
            operation,
            permission: AclPermission::Allow,
        }
    }

    #[test]
    fn covering_finds_literal_wildcard_and_prefixed_bindings_only() {
        let mut table = AclTable::default();
        table.insert(
            Uuid::from_u128(1),
            acl(ResourceType::Topic, "orders", PatternType::Literal, AclOperation::Read),
        );
        table.insert(
            Uuid::from_u128(2),
            acl(ResourceType::Topic, "*", PatternType::Literal, AclOperation::Describe),
        );
        table.insert(
            Uuid::from_u128(3),
            acl(ResourceType::Topic, "ord", PatternType::Prefixed, AclOperation::Write),
        );
        table.insert(
            Uuid::from_u128(4),
            acl(ResourceType::Topic, "orx", PatternType::Prefixed, AclOperation::Write),
        );
        table.insert(
            Uuid::from_u128(5),
            acl(ResourceType::Group, "orders", PatternType::Literal, AclOperation::Read),
        );
        table.insert(
            Uuid::from_u128(6),
            acl(ResourceType::Topic, "orde", PatternType::Literal, AclOperation::Read),
        );
        let mut found: Vec<_> = table.covering(ResourceType::Topic, "orders").cloned().collect();
        found.sort();
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(table.remove(&Uuid::from_u128(3)).is_some());
        assert_eq!(table.covering(ResourceType::Topic, "orders").count(), 2);
        assert!(table.remove(&Uuid::from_u128(1)).is_some());
        assert_eq!(table.covering(ResourceType::Topic, "orders").count(), 1);
    }

    #[test]
    fn filters_match_as_kafkas_acl_binding_filter() {
        let literal = acl(ResourceType::Topic, "orders", PatternType::Literal, AclOperation::Read);
        let prefixed = acl(ResourceType::Topic, "ord", PatternType::Prefixed, AclOperation::Read);
        let any = AclFilter {
            resource_type: None,
            resource_name: None,
            pattern: PatternFilter::Any,
            principal: None,
            host: None,
            operation: None,
            permission: None,
        };
        assert!(any.matches(&literal) && any.matches(&prefixed));
        let by_name = AclFilter {
            resource_name: Some("orders".into()),
            ..any.clone()
        };
        assert!(by_name.matches(&literal) && !by_name.matches(&prefixed));
        let matching = AclFilter {
            pattern: PatternFilter::Match,
            ..by_name.clone()
        };
        assert!(matching.matches(&literal) && matching.matches(&prefixed));
        let only_prefixed = AclFilter {
            pattern: PatternFilter::Exactly(PatternType::Prefixed),
            resource_name: None,
            ..any.clone()
        };
        assert!(!only_prefixed.matches(&literal) && only_prefixed.matches(&prefixed));
        let other_principal = AclFilter {
            principal: Some("User:bob".into()),
            ..any
        };
        assert!(!other_principal.matches(&literal));
    }

    #[test]
    fn allow_implies_describe_and_describe_configs_as_kafka_does() {
        use AclOperation::*;
        for op in [Read, Write, Delete, Alter, Describe, All] {
            assert!(op.allow_implies(Describe), "{op:?}");
        }
        assert!(!Create.allow_implies(Describe));
        assert!(AlterConfigs.allow_implies(DescribeConfigs));
        assert!(!Read.allow_implies(Write));
    }
}
