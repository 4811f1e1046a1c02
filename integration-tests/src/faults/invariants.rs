//! The invariants checked after a fault, and [`stop_and_check`], which stops the workload and
//! runs them all.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use super::final_log::{mark_resent_by_client, partition_log_bytes, read_final_log, FinalLog, StoredAs};
use super::workload::{ConsumerOutcome, Delivery, ProducerOutcome, Workload};
use crate::groups::Received;
use crate::Cluster;

/// How many violations of one invariant are spelled out in a failure message.
const VIOLATIONS_SHOWN: usize = 25;

/// Collects violations of one invariant and fails with the first few spelled out.
struct Violations {
    invariant: &'static str,
    shown: Vec<String>,
    total: usize,
}

impl Violations {
    fn new(invariant: &'static str) -> Self {
        Self {
            invariant,
            shown: Vec::new(),
            total: 0,
        }
    }
    fn push(&mut self, what: String) {
        self.total += 1;
        if self.shown.len() < VIOLATIONS_SHOWN {
            self.shown.push(what);
        }
    }
    fn into_result(self) -> Result<()> {
        if self.total == 0 {
            return Ok(());
        }
        bail!(
            "{}: {} violation(s), first {}:\n  {}",
            self.invariant,
            self.total,
            self.shown.len(),
            self.shown.join("\n  ")
        )
    }
}

/// Invariant 1: the final log has no gaps and no value twice (but those the client resent under
/// a new producer epoch, `FinalLog::resent_by_client`), and every acked record is in it at the
/// partition and offset its delivery report gave.
pub fn check_acked_records_exactly_once(log: &FinalLog, producer: &ProducerOutcome) -> Result<()> {
    let mut v = Violations::new("acked records must appear exactly once, at their acked offset");
    let mut positions: HashMap<&str, Vec<(i32, i64)>> = HashMap::new();
    for (p, records) in &log.records {
        for (i, (offset, value)) in records.iter().enumerate() {
            if *offset != i as i64 {
                v.push(format!(
                    "partition {p}: record #{i} has offset {offset} (gap or reordering)"
                ));
            }
            positions.entry(value.as_str()).or_default().push((*p, *offset));
        }
    }
    for (value, at) in &positions {
        if at.len() > 1 && !log.resent_by_client.contains(*value) {
            v.push(format!(
                "value {value} appears {} times: {at:?} (partition, offset)",
                at.len()
            ));
        }
    }
    for d in producer.acked() {
        let offset = d.acked_offset().expect("acked");
        let value = d.value();
        if offset < 0 {
            // Acknowledged without an offset: librdkafka infers a batch persisted when a later
            // batch of the same producer succeeds after it timed out, and reports it at offset
            // -1001. It must be in its partition (once: the duplicate check above).
            if log.offset_of(d.partition, &value).is_none() {
                v.push(format!(
                    "{value} acked at partition {} with no offset, but the final log has it nowhere there \
                     (high watermark {:?}); {value} is at {:?}",
                    d.partition,
                    log.high_watermarks.get(&d.partition),
                    positions.get(value.as_str())
                ));
            }
            continue;
        }
        match log.value_at(d.partition, offset) {
            Some(found) if found == value => {}
            found => v.push(format!(
                "{value} acked at partition {} offset {offset}, but the final log has {found:?} there \
                 (high watermark {:?}); {value} is at {:?}",
                d.partition,
                log.high_watermarks.get(&d.partition),
                positions.get(value.as_str())
            )),
        }
    }
    v.into_result()
}

/// [`mark_resent_by_client`] over the cluster's data directories.
pub fn mark_client_resends(cluster: &Cluster, topic: &str, log: &mut FinalLog) -> Vec<(String, Vec<StoredAs>)> {
    let dirs: Vec<_> = cluster.ids().into_iter().map(|id| cluster.data_dir(id)).collect();
    mark_resent_by_client(log, &dirs, topic)
}

/// Prints the records the client resent under a new producer epoch, each copy's epoch and
/// sequence: not a broker violation, but worth seeing.
pub fn report_resent_by_client(resent: &[(String, Vec<StoredAs>)]) {
    for (value, copies) in resent {
        let copies: Vec<String> = copies
            .iter()
            .map(|c| {
                format!(
                    "offset {} producer {} epoch {} sequence {}",
                    c.offset, c.producer_id, c.producer_epoch, c.sequence
                )
            })
            .collect();
        eprintln!(
            "[faults] {value} stored twice, resent by the client under a new producer epoch: {}",
            copies.join("; ")
        );
    }
}

/// Invariant 2: everything the consumer saw is in the final log at the same place, and per
/// partition its offsets strictly increase.
pub fn check_consumed_records_in_final_log(log: &FinalLog, consumer: &ConsumerOutcome) -> Result<()> {
    let mut v = Violations::new("consumed records must stay in the log, in increasing offset order");
    let mut last: HashMap<i32, i64> = HashMap::new();
    for s in &consumer.seen {
        if let Some(prev) = last.insert(s.partition, s.offset) {
            if s.offset <= prev {
                v.push(format!(
                    "partition {}: consumer went from offset {prev} back to {} ({})",
                    s.partition, s.offset, s.value
                ));
            }
        }
        match log.value_at(s.partition, s.offset) {
            Some(found) if found == s.value => {}
            found => v.push(format!(
                "partition {} offset {}: consumer saw {}, the final log has {found:?} (high watermark {:?})",
                s.partition,
                s.offset,
                s.value,
                log.high_watermarks.get(&s.partition)
            )),
        }
    }
    v.into_result()
}

/// Invariant 4: once no records are being produced, every node's copy of every partition holds
/// the same bytes. Waits (up to `timeout`) for followers still fetching the tail. Returns the
/// size in bytes of each partition's (identical) copies.
pub fn await_identical_replicas(
    cluster: &Cluster,
    topic: &str,
    partitions: i32,
    timeout: Duration,
) -> Result<BTreeMap<i32, usize>> {
    let deadline = Instant::now() + timeout;
    let mut sizes = BTreeMap::new();
    for p in 0..partitions {
        loop {
            let copies: Vec<(i32, Result<Vec<u8>>)> = cluster
                .ids()
                .into_iter()
                .map(|id| (id, partition_log_bytes(&cluster.data_dir(id), topic, p)))
                .collect();
            let difference = compare_copies(&copies);
            match difference {
                None => {
                    let size = copies.first().and_then(|(_, c)| c.as_ref().ok()).map_or(0, Vec::len);
                    sizes.insert(p, size);
                    break;
                }
                Some(what) if Instant::now() >= deadline => {
                    bail!("replicas of {topic}-{p} differ after {timeout:?}: {what}")
                }
                Some(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }
    Ok(sizes)
}

/// `None` if every copy read and all are equal; otherwise what differs.
fn compare_copies(copies: &[(i32, Result<Vec<u8>>)]) -> Option<String> {
    let mut ok = Vec::new();
    for (id, copy) in copies {
        match copy {
            Ok(bytes) => ok.push((*id, bytes)),
            Err(e) => return Some(format!("node {id}: {e:#}")),
        }
    }
    let (first_id, first) = ok[0];
    let lengths: Vec<(i32, usize)> = ok.iter().map(|(id, b)| (*id, b.len())).collect();
    if lengths.iter().any(|(_, len)| *len != first.len()) {
        return Some(format!("lengths in bytes per node {lengths:?}"));
    }
    for (id, bytes) in &ok[1..] {
        if let Some(at) = first.iter().zip(bytes.iter()).position(|(a, b)| a != b) {
            return Some(format!(
                "equal lengths {} but node {first_id} and node {id} differ from byte {at}: {:02x?} vs {:02x?}",
                first.len(),
                &first[at..(at + 16).min(first.len())],
                &bytes[at..(at + 16).min(bytes.len())]
            ));
        }
    }
    None
}

/// Per partition, whether some record enqueued after `since` was acked.
pub fn check_progress_after(producer: &ProducerOutcome, partitions: i32, since: Instant) -> Result<()> {
    let mut acked: BTreeMap<i32, u64> = (0..partitions).map(|p| (p, 0)).collect();
    for d in producer.acked().filter(|d| d.enqueued_at >= since) {
        *acked.entry(d.partition).or_default() += 1;
    }
    if acked.values().any(|n| *n == 0) {
        bail!(
            "no acked records enqueued after the fault on some partition: acked per partition {acked:?}; {}",
            producer.summary()
        );
    }
    Ok(())
}

/// Everything gathered once the workload stopped.
#[derive(Debug)]
pub struct Settled {
    pub producer: ProducerOutcome,
    pub consumer: Option<ConsumerOutcome>,
    pub log: Option<FinalLog>,
}

/// Acked records that are not in the final log where their delivery report put them: with
/// `acks=1`, what a leader acknowledged and lost with its unreplicated tail.
pub fn acked_but_missing(log: &FinalLog, producer: &ProducerOutcome) -> Vec<Delivery> {
    producer
        .acked()
        .filter(|d| final_offset(log, d).is_none())
        .cloned()
        .collect()
}

/// Where an acknowledged record is in the final log: at its acked offset, or, acknowledged
/// without one (librdkafka's inferred acks, offset -1001), wherever it is in its partition.
fn final_offset(log: &FinalLog, d: &Delivery) -> Option<i64> {
    let offset = d.acked_offset()?;
    let value = d.value();
    if offset < 0 {
        return log.offset_of(d.partition, &value);
    }
    (log.value_at(d.partition, offset) == Some(value.as_str())).then_some(offset)
}

/// The acknowledged records as a group should receive them, each at its acked offset or, for
/// one acknowledged without an offset, where the final log has it (-1001 if nowhere, which
/// the group checks then report as never received).
pub fn acked_records(log: &FinalLog, producer: &ProducerOutcome) -> Vec<Received> {
    producer
        .acked()
        .map(|d| Received {
            partition: d.partition,
            offset: final_offset(log, d).unwrap_or_else(|| d.acked_offset().unwrap_or(-1001)),
            value: d.value(),
        })
        .collect()
}

/// What the producer was promised, and so which invariants apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// `acks=all` with idempotence: every acked record exactly once (invariant 1).
    AllIdempotent,
    /// `acks=1`: acked records may be lost with a failed leader's tail; invariants 2-4 only.
    Leader,
}

/// Stops the workload and checks invariants 1-4: the cluster must be back to full ISR by
/// `full_isr_by`. Runs every check it can and fails with all their messages together.
pub fn stop_and_check(cluster: &Cluster, workload: Workload, full_isr_by: Instant) -> Result<Settled> {
    stop_and_check_with(cluster, workload, full_isr_by, Acks::AllIdempotent)
}

/// [`stop_and_check`] for a workload whose producer used `acks`.
pub fn stop_and_check_with(
    cluster: &Cluster,
    mut workload: Workload,
    full_isr_by: Instant,
    acks: Acks,
) -> Result<Settled> {
    let topic = workload.topic().to_string();
    let partitions = workload.partitions();
    let mut failures: Vec<String> = Vec::new();
    let producer = workload.stop_producing()?;
    if let Some(why) = &producer.stopped_early {
        failures.push(format!("the producer stopped early: {why}"));
    }
    let isr_timeout = full_isr_by.saturating_duration_since(Instant::now());
    if let Err(e) = cluster.await_full_isr(&topic, isr_timeout) {
        failures.push(format!("invariant 3 (full ISR after the fault): {e:#}"));
    }
    let log = match read_final_log(&cluster.bootstrap(), &topic, partitions, Duration::from_secs(30)) {
        Ok(mut log) => {
            let resent = mark_client_resends(cluster, &topic, &mut log);
            report_resent_by_client(&resent);
            if !resent.is_empty() {
                eprintln!(
                    "[faults] the producer's idempotence events:\n    {}",
                    producer.epoch_events_tail(40)
                );
            }
            Some(log)
        }
        Err(e) => {
            failures.push(format!("reading the final log: {e:#}"));
            None
        }
    };
    let mut consumer = None;
    if let Some(log) = &log {
        if acks == Acks::AllIdempotent {
            if let Err(e) = check_acked_records_exactly_once(log, &producer) {
                failures.push(format!(
                    "invariant 1: {e:#}\nthe producer's idempotence events:\n    {}",
                    producer.epoch_events_tail(40)
                ));
            }
        }
        let c = workload.stop_consuming(&log.high_watermarks, Duration::from_secs(20))?;
        if let Err(e) = check_consumed_records_in_final_log(log, &c) {
            failures.push(format!("invariant 2: {e:#}"));
        }
        if let Some(why) = &c.not_caught_up {
            failures.push(format!("invariant 2: {why}"));
        }
        consumer = Some(c);
    }
    let replica_bytes = match await_identical_replicas(cluster, &topic, partitions, Duration::from_secs(20)) {
        Ok(sizes) => sizes,
        Err(e) => {
            failures.push(format!("invariant 4 (identical replicas): {e:#}"));
            BTreeMap::new()
        }
    };
    if let Some(log) = &log {
        // Equal copies must also be non-empty copies: a partition with records has log bytes.
        for (p, hw) in &log.high_watermarks {
            if *hw > 0 && replica_bytes.get(p) == Some(&0) {
                failures.push(format!(
                    "invariant 4: partition {p} has high watermark {hw} but no .log bytes"
                ));
            }
        }
    }
    eprintln!(
        "[faults] {}; consumer saw {:?} records; final log (high watermarks) {:?}; replica bytes {replica_bytes:?}",
        producer.summary(),
        consumer.as_ref().map(|c| c.seen.len()),
        log.as_ref().map(|l| &l.high_watermarks)
    );
    if !failures.is_empty() {
        bail!("{} check(s) failed:\n{}", failures.len(), failures.join("\n"));
    }
    Ok(Settled {
        producer,
        consumer,
        log,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::Seen;

    fn log_of(partitions: &[&[&str]]) -> FinalLog {
        let mut records = BTreeMap::new();
        let mut high_watermarks = BTreeMap::new();
        for (p, values) in partitions.iter().enumerate() {
            let r: Vec<(i64, String)> = values
                .iter()
                .enumerate()
                .map(|(o, v)| (o as i64, v.to_string()))
                .collect();
            high_watermarks.insert(p as i32, r.len() as i64);
            records.insert(p as i32, r);
        }
        FinalLog {
            high_watermarks,
            records,
            resent_by_client: Default::default(),
        }
    }

    fn acked(seq: u64, partition: i32, offset: i64) -> Delivery {
        Delivery {
            seq,
            partition,
            enqueued_at: Instant::now(),
            outcome: Some(Ok(offset)),
            reported_at: Some(Instant::now()),
        }
    }

    fn producer(deliveries: Vec<Delivery>) -> ProducerOutcome {
        ProducerOutcome {
            deliveries,
            client_errors: Vec::new(),
            epoch_events: Vec::new(),
            stopped_early: None,
        }
    }

    fn seen(partition: i32, offset: i64, value: &str) -> Seen {
        Seen {
            partition,
            offset,
            value: value.to_string(),
        }
    }

    #[test]
    fn acked_records_at_their_offsets_pass() {
        let log = log_of(&[&["rec-0", "rec-2"], &["rec-1"]]);
        let p = producer(vec![acked(0, 0, 0), acked(1, 1, 0), acked(2, 0, 1)]);
        check_acked_records_exactly_once(&log, &p).unwrap();
    }

    #[test]
    fn a_lost_acked_record_a_moved_one_and_a_duplicate_are_each_reported() {
        let log = log_of(&[&["rec-0", "rec-0"], &["rec-2"]]);
        let p = producer(vec![acked(0, 0, 0), acked(1, 1, 0), acked(2, 0, 1)]);
        let e = check_acked_records_exactly_once(&log, &p).unwrap_err().to_string();
        assert!(e.contains("3 violation(s)"), "{e}");
        assert!(e.contains("rec-0 appears 2 times"), "{e}");
        assert!(e.contains("rec-1 acked at partition 1 offset 0"), "{e}");
        assert!(e.contains("rec-2 acked at partition 0 offset 1"), "{e}");
    }

    #[test]
    fn a_record_acked_without_an_offset_must_be_in_its_partition_and_groups_expect_it_there() {
        let log = log_of(&[&["rec-0", "rec-1"], &["rec-2"]]);
        let found = producer(vec![acked(0, 0, 0), acked(1, 0, -1001)]);
        check_acked_records_exactly_once(&log, &found).unwrap();
        assert!(acked_but_missing(&log, &found).is_empty());
        let offsets: Vec<i64> = acked_records(&log, &found).iter().map(|r| r.offset).collect();
        assert_eq!(offsets, vec![0, 1]);

        let elsewhere = producer(vec![acked(2, 0, -1001)]);
        let e = check_acked_records_exactly_once(&log, &elsewhere)
            .unwrap_err()
            .to_string();
        assert!(e.contains("rec-2 acked at partition 0 with no offset"), "{e}");
        assert_eq!(acked_but_missing(&log, &elsewhere).len(), 1);
        assert_eq!(acked_records(&log, &elsewhere)[0].offset, -1001);
    }

    #[test]
    fn a_gap_in_the_final_log_is_reported() {
        let mut log = log_of(&[&["rec-0", "rec-1"]]);
        log.records.get_mut(&0).unwrap()[1].0 = 2;
        let e = check_acked_records_exactly_once(&log, &producer(Vec::new()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("record #1 has offset 2"), "{e}");
    }

    #[test]
    fn consumed_records_that_vanished_or_went_backwards_are_reported() {
        let log = log_of(&[&["rec-0", "rec-3"]]);
        let ok = ConsumerOutcome {
            seen: vec![seen(0, 0, "rec-0"), seen(0, 1, "rec-3")],
            errors: Vec::new(),
            not_caught_up: None,
        };
        check_consumed_records_in_final_log(&log, &ok).unwrap();
        let bad = ConsumerOutcome {
            seen: vec![seen(0, 1, "rec-1"), seen(0, 0, "rec-0"), seen(0, 2, "rec-2")],
            errors: Vec::new(),
            not_caught_up: None,
        };
        let e = check_consumed_records_in_final_log(&log, &bad).unwrap_err().to_string();
        assert!(e.contains("3 violation(s)"), "{e}");
        assert!(
            e.contains("consumer saw rec-1, the final log has Some(\"rec-3\")"),
            "{e}"
        );
        assert!(e.contains("from offset 1 back to 0"), "{e}");
        assert!(e.contains("consumer saw rec-2, the final log has None"), "{e}");
    }

    #[test]
    fn copies_of_different_length_or_content_differ() {
        let same = [(1, Ok(vec![1, 2, 3])), (2, Ok(vec![1, 2, 3]))];
        assert_eq!(compare_copies(&same), None);
        let shorter = [(1, Ok(vec![1, 2, 3])), (2, Ok(vec![1, 2]))];
        assert!(compare_copies(&shorter).unwrap().contains("lengths"));
        let flipped = [(1, Ok(vec![1, 2, 3])), (2, Ok(vec![1, 9, 3]))];
        assert!(compare_copies(&flipped).unwrap().contains("differ from byte 1"));
    }
}
