//! Proof that a broker still serves other clients after a test fed it hostile input: a record
//! produced with `acks=all` and read back, each on a connection of its own.

use std::time::Duration;

use anyhow::{anyhow, ensure, Context, Result};
use rdkafka::consumer::StreamConsumer;
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::Offset;

use crate::{clients, SluiceNode};

/// How long a canary record may take to be acknowledged, and then to be read back.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);
const READ_TIMEOUT: Duration = Duration::from_secs(20);

/// A one-partition topic with a producer and a consumer assigned to it from offset 0.
pub struct Canary {
    topic: String,
    producer: FutureProducer,
    consumer: StreamConsumer,
    next_offset: i64,
}

impl Canary {
    /// Creates `topic` on `node` and checks once that it works.
    pub async fn start(node: &SluiceNode, topic: &str) -> Result<Canary> {
        let admin = clients::admin_client(&node.bootstrap())?;
        clients::create_topic(&admin, topic, 1, &[]).await?;
        let consumer = clients::stream_consumer(&node.bootstrap())?;
        clients::assign(&consumer, topic, &[0], Offset::Offset(0))?;
        let mut canary = Canary {
            topic: topic.to_string(),
            producer: clients::future_producer(&node.bootstrap())?,
            consumer,
            next_offset: 0,
        };
        canary.check("started").await?;
        Ok(canary)
    }

    /// Produces `label` and reads it back: it must land at the next offset and come back intact.
    pub async fn check(&mut self, label: &str) -> Result<()> {
        let record = FutureRecord::<str, str>::to(&self.topic).partition(0).payload(label);
        let delivered = self
            .producer
            .send(record, DELIVERY_TIMEOUT)
            .await
            .map_err(|(e, _)| anyhow!("canary record {label:?} was not acknowledged: {e}"))?;
        ensure!(
            delivered.offset == self.next_offset,
            "canary record {label:?} landed at offset {}, expected {}",
            delivered.offset,
            self.next_offset
        );
        let message = tokio::time::timeout(READ_TIMEOUT, self.consumer.recv())
            .await
            .with_context(|| format!("canary record {label:?} not read back within {READ_TIMEOUT:?}"))??;
        ensure!(
            (message.offset(), message.payload()) == (delivered.offset, Some(label.as_bytes())),
            "canary read back offset {} payload {:?}, expected {label:?} at {}",
            message.offset(),
            message.payload().map(String::from_utf8_lossy),
            delivered.offset
        );
        self.next_offset += 1;
        Ok(())
    }
}
