//! Incremental fetch sessions (KIP-227) against a real broker, in typed Fetch requests by topic
//! name (v12) and by topic id (v16): a full fetch opens a session; incremental fetches then
//! carry only what changed and are answered only with partitions that have news; out-of-order
//! epochs, unknown sessions and a session used with the other naming are refused with Kafka's
//! errors; forgotten partitions stop being answered; the final epoch closes the session. Java
//! consumers and kafka-python use sessions by default, so the compatibility matrix covers real
//! clients too.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{ensure, Result};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use sluice_integration_tests::kafka_client::{self, KafkaConnection};
use sluice_integration_tests::node::{NodeOptions, SluiceNode};
use uuid::Uuid;

const IO_TIMEOUT: Duration = Duration::from_secs(30);
const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;
const INVALID_FETCH_SESSION_EPOCH: i16 = 71;
const FETCH_SESSION_TOPIC_ID_ERROR: i16 = 106;

/// How the requests name the topic.
#[derive(Clone, Copy)]
enum Naming {
    Name,
    Id(Uuid),
}

impl Naming {
    fn version(self) -> i16 {
        match self {
            Naming::Name => 12,
            Naming::Id(_) => 16,
        }
    }
}

fn fetch_topic(topic: &str, naming: Naming, partitions: &[(i32, i64)]) -> FetchTopic {
    let t = FetchTopic::default().with_partitions(
        partitions
            .iter()
            .map(|&(p, offset)| {
                FetchPartition::default()
                    .with_partition(p)
                    .with_fetch_offset(offset)
                    .with_partition_max_bytes(1 << 20)
            })
            .collect(),
    );
    match naming {
        Naming::Name => t.with_topic(TopicName(StrBytes::from_string(topic.to_string()))),
        Naming::Id(id) => t.with_topic_id(id),
    }
}

fn request(session_id: i32, epoch: i32, topics: Vec<FetchTopic>) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(i32::MAX)
        .with_session_id(session_id)
        .with_session_epoch(epoch)
        .with_topics(topics)
}

/// (partition, record count) of each partition the response carries.
fn answered(response: &FetchResponse) -> Vec<(i32, usize)> {
    response
        .responses
        .iter()
        .flat_map(|t| t.partitions.iter())
        .map(|p| {
            let records = p.records.as_deref().unwrap_or_default();
            (
                p.partition_index,
                sluice_protocol::batch::BatchIter::new(records).count(),
            )
        })
        .collect()
}

fn scenario(addr: SocketAddr, topic: &str, naming: Naming) -> Result<()> {
    let version = naming.version();
    let mut conn = KafkaConnection::connect(addr, "fetch-sessions", IO_TIMEOUT)?;
    ensure!(kafka_client::produce_one_record(addr, topic, 1)? == 0, "produce failed");

    // A full fetch opens a session and answers every partition.
    let full = conn.call(
        &request(0, 0, vec![fetch_topic(topic, naming, &[(0, 0), (1, 0), (2, 0)])]),
        version,
    )?;
    ensure!(
        full.error_code == 0 && full.session_id != 0,
        "no session opened: {full:?}"
    );
    let id = full.session_id;
    ensure!(
        answered(&full) == [(0, 1), (1, 0), (2, 0)],
        "full answer {:?}",
        answered(&full)
    );

    // Position moved on partition 0, nothing new anywhere: nothing to answer.
    let quiet = conn.call(&request(id, 1, vec![fetch_topic(topic, naming, &[(0, 1)])]), version)?;
    ensure!(quiet.error_code == 0 && quiet.session_id == id, "{quiet:?}");
    ensure!(
        answered(&quiet).is_empty(),
        "an idle session answered {:?}",
        answered(&quiet)
    );

    // A new record: only partition 0 is answered, from the position the session holds.
    ensure!(kafka_client::produce_one_record(addr, topic, 1)? == 0, "produce failed");
    let news = conn.call(&request(id, 2, vec![]), version)?;
    ensure!(answered(&news) == [(0, 1)], "after a produce {:?}", answered(&news));

    // Epochs go in order; a session is used with the naming that opened it; ids must exist.
    let replayed = conn.call(&request(id, 2, vec![]), version)?;
    ensure!(replayed.error_code == INVALID_FETCH_SESSION_EPOCH, "{replayed:?}");
    let other_naming = match naming {
        Naming::Name => 16,
        Naming::Id(_) => 12,
    };
    let crossed = conn.call(&request(id, 3, vec![]), other_naming)?;
    ensure!(crossed.error_code == FETCH_SESSION_TOPIC_ID_ERROR, "{crossed:?}");
    let unknown = conn.call(&request(id.wrapping_add(7), 1, vec![]), version)?;
    ensure!(unknown.error_code == FETCH_SESSION_ID_NOT_FOUND, "{unknown:?}");

    // Forgetting partition 0 stops its answers, however much arrives on it.
    let forget = ForgottenTopic::default().with_partitions(vec![0]);
    let forget = match naming {
        Naming::Name => forget.with_topic(TopicName(StrBytes::from_string(topic.to_string()))),
        Naming::Id(id) => forget.with_topic_id(id),
    };
    let forgot = conn.call(
        &request(id, 3, vec![]).with_forgotten_topics_data(vec![forget]),
        version,
    )?;
    ensure!(
        forgot.error_code == 0 && answered(&forgot).is_empty(),
        "{:?}",
        answered(&forgot)
    );
    ensure!(kafka_client::produce_one_record(addr, topic, 1)? == 0, "produce failed");
    let after = conn.call(&request(id, 4, vec![]), version)?;
    ensure!(
        answered(&after).is_empty(),
        "a forgotten partition was answered: {:?}",
        answered(&after)
    );

    // The final epoch closes the session: answered in full, without a session.
    let closing = conn.call(
        &request(id, -1, vec![fetch_topic(topic, naming, &[(0, 0), (1, 0)])]),
        version,
    )?;
    ensure!(closing.error_code == 0 && closing.session_id == 0, "{closing:?}");
    ensure!(
        answered(&closing) == [(0, 3), (1, 0)],
        "closing answer {:?}",
        answered(&closing)
    );
    let gone = conn.call(&request(id, 5, vec![]), version)?;
    ensure!(gone.error_code == FETCH_SESSION_ID_NOT_FOUND, "{gone:?}");
    Ok(())
}

#[test]
fn incremental_fetch_sessions_answer_only_what_changed() -> Result<()> {
    let node = SluiceNode::start(NodeOptions::default())?;
    for (topic, by_id) in [("sessions-by-name", false), ("sessions-by-id", true)] {
        ensure!(
            kafka_client::create_topic(node.addr(), topic, 3, IO_TIMEOUT)? == 0,
            "CreateTopics failed"
        );
        let naming = if by_id {
            Naming::Id(kafka_client::topic_id(node.addr(), topic)?)
        } else {
            Naming::Name
        };
        scenario(node.addr(), topic, naming)?;
    }
    Ok(())
}

#[test]
fn a_full_session_cache_answers_without_a_session() -> Result<()> {
    let node = SluiceNode::start(NodeOptions::default().set("max.incremental.fetch.session.cache.slots", 1))?;
    let topic = "one-slot";
    ensure!(
        kafka_client::create_topic(node.addr(), topic, 1, IO_TIMEOUT)? == 0,
        "CreateTopics failed"
    );
    let mut conn = KafkaConnection::connect(node.addr(), "fetch-sessions", IO_TIMEOUT)?;
    let open =
        |conn: &mut KafkaConnection| conn.call(&request(0, 0, vec![fetch_topic(topic, Naming::Name, &[(0, 0)])]), 12);
    let first = open(&mut conn)?;
    ensure!(first.session_id != 0, "{first:?}");
    // The one slot is taken by a session that is neither stale nor smaller.
    let second = open(&mut conn)?;
    ensure!(second.error_code == 0 && second.session_id == 0, "{second:?}");
    ensure!(answered(&second) == [(0, 0)], "{:?}", answered(&second));
    Ok(())
}
