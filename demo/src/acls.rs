//! The seed workload's principals and what each may do, and `sluice-demo acls`, which grants it
//! as an administrator. The bindings are those of docs/security.md's `kafka-acls` commands:
//!
//! | principal | `kafka-acls` | bindings |
//! |---|---|---|
//! | `User:orders-producer` | `--producer --topic orders` | WRITE, DESCRIBE, CREATE on topic orders |
//! | `User:orders-sink` | `--consumer --topic orders --group orders-sink` | READ, DESCRIBE on topic orders; READ on group orders-sink |
//! | `User:analytics` | `--consumer --topic orders --group analytics` | READ, DESCRIBE on topic orders; READ on group analytics |
//!
//! Nothing else: no principal may write what it reads, read another's group, or administer
//! the cluster. The producer creates the topic itself (CREATE), as it does without security.

use std::time::Duration;

use anyhow::{Context, Result};

use crate::admin::{connect_retrying, Acl, Operation, ResourceType};
use crate::security::{ClientSecurity, SecurityArgs};

/// The super user (`super.users=User:admin`) that creates the others' ACLs.
pub const ADMIN: &str = "admin";
pub const PRODUCER: &str = "orders-producer";
pub const SINK: &str = "orders-sink";
pub const ANALYTICS: &str = "analytics";
/// Every user of a secured demo cluster, the administrator first.
pub const USERS: [&str; 4] = [ADMIN, PRODUCER, SINK, ANALYTICS];

/// How long `acls` keeps trying to log in (the brokers create their users just after they start).
const LOGIN_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, clap::Args)]
pub struct AclsArgs {
    /// Kafka bootstrap servers, `host:port,...`.
    #[arg(long)]
    pub bootstrap: String,
    #[arg(long, default_value = "orders")]
    pub topic: String,
    /// The sink's consumer group.
    #[arg(long, default_value = "orders-sink")]
    pub sink_group: String,
    /// Analytics' consumer group.
    #[arg(long, default_value = "analytics")]
    pub analytics_group: String,
    /// The administrator's login (a super user, or one with ALTER on the cluster).
    #[command(flatten)]
    pub security: SecurityArgs,
}

/// The bindings of the table above.
pub fn workload_acls(topic: &str, sink_group: &str, analytics_group: &str) -> Vec<Acl> {
    let acl = |user: &str, operation, resource_type, resource_name: &str| Acl {
        principal: format!("User:{user}"),
        operation,
        resource_type,
        resource_name: resource_name.to_string(),
    };
    let mut acls = vec![
        acl(PRODUCER, Operation::Write, ResourceType::Topic, topic),
        acl(PRODUCER, Operation::Describe, ResourceType::Topic, topic),
        acl(PRODUCER, Operation::Create, ResourceType::Topic, topic),
    ];
    for (user, group) in [(SINK, sink_group), (ANALYTICS, analytics_group)] {
        acls.push(acl(user, Operation::Read, ResourceType::Topic, topic));
        acls.push(acl(user, Operation::Describe, ResourceType::Topic, topic));
        acls.push(acl(user, Operation::Read, ResourceType::Group, group));
    }
    acls
}

/// Creates the workload's ACLs as the administrator `admin` logs in as. Repeating it is harmless.
pub fn grant(bootstrap: &str, admin: &ClientSecurity, acls: &[Acl]) -> Result<()> {
    let mut connection =
        connect_retrying(bootstrap, admin, LOGIN_TIMEOUT).context("cannot log in as the administrator")?;
    connection.create_acls(acls)
}

/// `sluice-demo acls`.
pub fn run(args: &AclsArgs) -> Result<()> {
    let acls = workload_acls(&args.topic, &args.sink_group, &args.analytics_group);
    grant(&args.bootstrap, &args.security.load()?, &acls)?;
    for acl in &acls {
        tracing::info!(%acl, "created ACL");
    }
    Ok(())
}
