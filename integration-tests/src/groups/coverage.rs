//! The records a group must receive (produced and acknowledged) and the checks that its
//! members received them: every one, exactly once where required, over a balanced assignment.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;

use super::member_log::{MemberLog, Received};
use crate::clients::send_when_room;

/// Counts acks and keeps the first failures of an idempotent `acks=all` producer.
#[derive(Default)]
struct AckCounter {
    acked: Mutex<Vec<Received>>,
    failed: Mutex<Vec<String>>,
}

struct AckContext(Arc<AckCounter>);
impl ClientContext for AckContext {}
impl ProducerContext for AckContext {
    type DeliveryOpaque = usize;
    fn delivery(&self, result: &DeliveryResult<'_>, seq: usize) {
        match result {
            Ok(m) => self.0.acked.lock().expect("lock").push(Received {
                partition: m.partition(),
                offset: m.offset(),
                value: crate::faults::record_value(seq as u64),
            }),
            Err((e, _)) => {
                let mut failed = self.0.failed.lock().expect("lock");
                if failed.len() < 20 {
                    failed.push(format!("rec-{seq}: {e}"));
                }
            }
        }
    }
}

/// Produces the values `rec-<seq>` for `seqs` round-robin over `partitions` with librdkafka's
/// idempotent producer (`acks=all`) and returns each acknowledged (partition, offset, value).
/// Fails if any record is not acknowledged.
pub fn produce_all(bootstrap: &str, topic: &str, partitions: i32, seqs: std::ops::Range<u64>) -> Result<Vec<Received>> {
    let counter = Arc::new(AckCounter::default());
    let producer: BaseProducer<AckContext> = crate::faults::workload_producer_config(bootstrap)
        .set("client.id", "sluice-groups-producer")
        .set("linger.ms", "20")
        .create_with_context(AckContext(counter.clone()))?;
    let expected = seqs.end - seqs.start;
    for seq in seqs {
        let value = crate::faults::record_value(seq);
        let record = BaseRecord::<[u8], [u8], usize>::with_opaque_to(topic, seq as usize)
            .partition((seq % partitions as u64) as i32)
            .payload(value.as_bytes());
        send_when_room(&producer, record, Duration::from_millis(5)).with_context(|| format!("enqueue {value}"))?;
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(120)).context("flush")?;
    producer.poll(Duration::ZERO);
    let failed = counter.failed.lock().expect("lock").clone();
    let acked = std::mem::take(&mut *counter.acked.lock().expect("lock"));
    if !failed.is_empty() || acked.len() as u64 != expected {
        bail!(
            "{} of {expected} records acknowledged; failures: {failed:?}",
            acked.len()
        );
    }
    Ok(acked)
}

/// Every acknowledged record must have been received by some member of the group, with the
/// value the producer sent at that offset; with `exactly_once`, no offset twice either.
pub fn check_group_received(
    group: &str,
    logs: &[&Arc<MemberLog>],
    acked: &[Received],
    exactly_once: bool,
) -> Result<()> {
    let mut seen: HashMap<(i32, i64), (String, u32)> = HashMap::new();
    for log in logs {
        for r in log.received.lock().expect("lock").iter() {
            let e = seen.entry((r.partition, r.offset)).or_insert((r.value.clone(), 0));
            e.1 += 1;
            if e.0 != r.value {
                bail!(
                    "group {group}: {}-{} was received as {:?} and as {:?}",
                    r.partition,
                    r.offset,
                    e.0,
                    r.value
                );
            }
        }
    }
    let mut missing = Vec::new();
    let mut wrong = Vec::new();
    for a in acked {
        match seen.get(&(a.partition, a.offset)) {
            None => missing.push(format!("{} at {}-{}", a.value, a.partition, a.offset)),
            Some((v, _)) if *v != a.value => {
                wrong.push(format!("{}-{}: acked {} received {v}", a.partition, a.offset, a.value))
            }
            Some(_) => {}
        }
    }
    let duplicates: Vec<String> = seen
        .iter()
        .filter(|(_, (_, n))| *n > 1)
        .take(10)
        .map(|((p, o), (v, n))| format!("{v} at {p}-{o} x{n}"))
        .collect();
    let n_dup = seen.values().filter(|(_, n)| *n > 1).count();
    if !missing.is_empty() || !wrong.is_empty() || (exactly_once && n_dup > 0) {
        missing.sort();
        bail!(
            "group {group}: {} of {} acknowledged records never received (first: {:?}); {} received with another value \
             ({:?}); {n_dup} offsets received more than once{} ({duplicates:?})",
            missing.len(),
            acked.len(),
            missing.iter().take(10).collect::<Vec<_>>(),
            wrong.len(),
            wrong.iter().take(5).collect::<Vec<_>>(),
            if exactly_once { " (expected exactly once)" } else { "" }
        );
    }
    Ok(())
}

/// Distinct (partition, offset) pairs received by the members together.
pub fn distinct_received(logs: &[&Arc<MemberLog>]) -> usize {
    let mut set = BTreeSet::new();
    for log in logs {
        for r in log.received.lock().expect("lock").iter() {
            set.insert((r.partition, r.offset));
        }
    }
    set.len()
}

/// Waits until the members' current assignments are disjoint, non-empty for each member, and
/// cover partitions 0..`partitions`; returns them.
pub fn await_balanced(logs: &[&Arc<MemberLog>], partitions: i32, timeout: Duration) -> Result<Vec<Vec<i32>>> {
    let mut last = Vec::new();
    crate::clients::wait_until(timeout, "", || {
        last = logs.iter().map(|l| l.current_assignment().1).collect::<Vec<_>>();
        let mut all: Vec<i32> = last.iter().flatten().copied().collect();
        all.sort();
        let covered = all == (0..partitions).collect::<Vec<_>>();
        (covered && last.iter().all(|a| !a.is_empty())).then(|| last.clone())
    })
    .map_err(|_| {
        anyhow!(
            "members never held a complete, disjoint assignment of {partitions} partitions within {timeout:?}: {last:?}; \
             member errors: {:?}",
            logs.iter().map(|l| l.errors_tail(3)).collect::<Vec<_>>()
        )
    })
}
