//! Creating the orders topic if it is missing, through the Kafka admin API.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::types::RDKafkaErrorCode;

use crate::security::ClientSecurity;

/// Creates `topic` with `partitions` and `replication_factor` unless it exists (an existing
/// topic is left as it is, whatever its layout).
pub fn ensure_topic(
    bootstrap: &str,
    security: &ClientSecurity,
    topic: &str,
    partitions: i32,
    replication_factor: i32,
) -> Result<()> {
    let mut config = ClientConfig::new();
    security.apply(&mut config);
    let admin: AdminClient<DefaultClientContext> = config
        .set("bootstrap.servers", bootstrap)
        .set("client.id", "sluice-demo-admin")
        .create()
        .context("cannot create the admin client; check --bootstrap")?;
    let options = AdminOptions::new()
        .request_timeout(Some(Duration::from_secs(30)))
        .operation_timeout(Some(Duration::from_secs(30)));
    let new_topic = NewTopic::new(topic, partitions, TopicReplication::Fixed(replication_factor));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let results = runtime
        .block_on(admin.create_topics([&new_topic], &options))
        .with_context(|| format!("cannot create topic {topic}: are the brokers at {bootstrap} reachable?"))?;
    for result in results {
        match result {
            Ok(_) => tracing::info!(topic, partitions, replication_factor, "created topic"),
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => tracing::info!(topic, "topic exists"),
            Err((
                _,
                code @ (RDKafkaErrorCode::TopicAuthorizationFailed | RDKafkaErrorCode::ClusterAuthorizationFailed),
            )) => {
                bail!(
                    "not allowed to create topic {topic} ({code}): this principal needs CREATE on it \
                     (`sluice-demo acls` grants it to orders-producer), or create the topic beforehand"
                )
            }
            Err((_, code)) => bail!(
                "cannot create topic {topic} ({partitions} partitions, replication factor {replication_factor}): \
                 {code}; the cluster needs at least {replication_factor} brokers, or pass a smaller \
                 --replication-factor"
            ),
        }
    }
    Ok(())
}
