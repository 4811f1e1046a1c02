//! `sluice plan`: a back-of-the-envelope capacity planner for a Sluice (or Kafka) cluster.
//!
//! Given a produce rate, a message size, a replication factor, a retention and the number of
//! consumer groups, it says how much disk, network and page cache each broker needs, how many
//! partitions to create, and warns when the brokers described by the assumptions would not cope.
//! It is arithmetic, not a benchmark: every figure follows from the model below, which the report
//! repeats in its footer so nobody has to trust a number they cannot re-derive.
//!
//! # Model
//!
//! - **Disk, raw** = rate × size × retention × RF ÷ compression ratio, spread evenly over the brokers.
//! - **Disk, with overheads** counts the Kafka record-batch format as stored: each record carries
//!   [`RECORD_OVERHEAD_BYTES`] of varints and attributes (12 B assumed: about 9 for a null key and
//!   small deltas, more for larger deltas and headers), and each batch a [`BATCH_HEADER_BYTES`]
//!   (61 B) header shared by the records of one producer batch, assumed full at Kafka's default
//!   `batch.size` of 16384 B. On top, the offset index (8 B) and time index (12 B) take at most one
//!   entry each per `index.interval.bytes` (4096 B) of log; the planner counts that bound.
//!   Not counted: the active segment kept past retention (deletion is by whole segment, so up to
//!   `segment.bytes` per partition replica) and headroom for reassignments.
//! - **Network**: each produced byte enters a leader once (producer in), leaves it RF−1 times to
//!   the followers (replication out) and once per consumer group (consumer out), so the leader
//!   fan-out is RF−1+groups; followers take in the replication bytes (replication in). With leaders
//!   spread evenly each broker carries 1/brokers of every flow. Figures are shown raw (payload) and
//!   on the wire (batch framing included); TCP/IP and request headers are not counted, which the
//!   70% NIC limit leaves room for.
//! - **Page cache** = a broker's writes, leader and follower alike, over `--catch-up-seconds`.
//!   Consumers read only leaders, but the kernel caches every written byte and evicts by age, not by
//!   whether a consumer will read it, so follower writes take their share of memory too. The
//!   leader-only part is reported alongside.
//! - **Partitions**: at least one per broker, enough that none carries more than
//!   `--partition-mbps`, rounded up to a multiple of the brokers so leaders spread evenly.

use std::fmt;
use std::io::Write;
use std::process::ExitCode;

/// Kafka record batch header (magic v2): base offset through record count.
pub const BATCH_HEADER_BYTES: f64 = 61.0;
/// Assumed framing per record inside a batch: length, attributes, timestamp and offset deltas,
/// key and value lengths and header count, mostly one- or two-byte varints.
pub const RECORD_OVERHEAD_BYTES: f64 = 12.0;
/// Kafka's default producer `batch.size`; batches are assumed to fill it.
pub const PRODUCER_BATCH_BYTES: f64 = 16384.0;
/// Kafka's default `index.interval.bytes`.
pub const INDEX_INTERVAL_BYTES: f64 = 4096.0;
/// Offset index entry (relative offset, position) plus time index entry (timestamp, relative offset).
pub const INDEX_ENTRY_BYTES: f64 = 8.0 + 12.0;
/// Share of a NIC a broker is planned to use; the rest absorbs bursts, reassignments, catch-up
/// reads and protocol headers.
pub const NIC_PLANNED_FRACTION: f64 = 0.7;

/// Plans disk, network, page cache and partitions for a produce rate and a retention.
#[derive(Debug, Clone, clap::Args)]
pub struct PlanArgs {
    /// Messages produced per second, across all producers (plan for the peak).
    #[arg(long, value_name = "MSGS_PER_SEC")]
    pub rate: f64,
    /// Bytes per message before compression: key plus value plus headers.
    #[arg(long = "size", value_name = "BYTES")]
    pub size_bytes: u64,
    /// Replication factor.
    #[arg(long, default_value_t = 3)]
    pub rf: u32,
    /// How long the log is kept: a whole number and a unit, ms, s, m, h or d (168h, 7d, 30m, 3600s).
    #[arg(long = "retention", value_name = "DURATION", default_value = "168h", value_parser = parse_duration_ms)]
    pub retention_ms: u64,
    /// Consumer groups that each read everything produced.
    #[arg(long, default_value_t = 1)]
    pub groups: u32,
    /// Brokers in the cluster.
    #[arg(long, default_value_t = 3)]
    pub brokers: u32,
    /// Usable log capacity of one broker, with a unit: B, KB, MB, GB, TB, PB (decimal) or KiB..TiB.
    #[arg(long = "disk-per-broker", value_name = "SIZE", default_value = "16TB", value_parser = parse_size_bytes)]
    pub disk_per_broker_bytes: u64,
    /// NIC speed of one broker in gigabits per second.
    #[arg(long, value_name = "GBIT_PER_SEC", default_value_t = 10.0)]
    pub nic_gbps: f64,
    /// How far behind (in seconds of log) consumers may fall and still be served from page cache.
    #[arg(long = "catch-up-seconds", value_name = "SECONDS", default_value_t = 300)]
    pub catch_up_seconds: u64,
    /// Sustained throughput one partition is planned for, in megabytes (not megabits) per second.
    #[arg(long = "partition-mbps", value_name = "MB_PER_SEC", default_value_t = 10.0)]
    pub partition_mbps: f64,
    /// Uncompressed size ÷ compressed size of a batch: 1.0 is no compression, 2.0 halves the bytes.
    #[arg(long, value_name = "RATIO", default_value_t = 1.0)]
    pub compression_ratio: f64,
}

/// Bytes per second through one broker, by flow.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Flows {
    pub producer_in: f64,
    pub replication_in: f64,
    pub replication_out: f64,
    pub consumer_out: f64,
}

impl Flows {
    fn per_broker(produced_bytes_per_sec: f64, args: &PlanArgs) -> Flows {
        let share = produced_bytes_per_sec / f64::from(args.brokers);
        let replicas = f64::from(args.rf - 1);
        Flows {
            producer_in: share,
            replication_in: share * replicas,
            replication_out: share * replicas,
            consumer_out: share * f64::from(args.groups),
        }
    }

    pub fn total_in(&self) -> f64 {
        self.producer_in + self.replication_in
    }

    pub fn total_out(&self) -> f64 {
        self.replication_out + self.consumer_out
    }

    /// The report's rows: label, bytes per second, and whether the row is a total.
    fn rows(&self) -> [(&'static str, f64, bool); 6] {
        [
            ("producer in", self.producer_in, false),
            ("replication in", self.replication_in, false),
            ("total in", self.total_in(), true),
            ("replication out", self.replication_out, false),
            ("consumer out", self.consumer_out, false),
            ("total out", self.total_out(), true),
        ]
    }
}

/// What `sluice plan` computed; every byte figure is decimal (1 TB = 10^12 B).
#[derive(Debug, Clone)]
pub struct Plan {
    pub args: PlanArgs,
    /// Records in one full producer batch.
    pub records_per_batch: u64,
    /// Bytes one message takes in a stored batch: its compressed record plus its share of the header.
    pub stored_bytes_per_message: f64,
    /// rate × size × retention × RF ÷ compression ÷ brokers.
    pub disk_raw_per_broker_bytes: f64,
    /// The raw figure plus record and batch framing and the offset and time indexes.
    pub disk_per_broker_bytes: f64,
    /// Payload flows per broker (size ÷ compression ratio per message).
    pub network_raw: Flows,
    /// Flows per broker as batches cross the wire, framing included.
    pub network: Flows,
    /// Every replica's writes on one broker over the catch-up window.
    pub page_cache_per_broker_bytes: f64,
    /// The leader part of it: what consumers actually read.
    pub page_cache_leader_per_broker_bytes: f64,
    pub partitions: u64,
    pub warnings: Vec<String>,
}

impl Plan {
    pub fn disk_raw_cluster_bytes(&self) -> f64 {
        self.disk_raw_per_broker_bytes * f64::from(self.args.brokers)
    }

    pub fn disk_cluster_bytes(&self) -> f64 {
        self.disk_per_broker_bytes * f64::from(self.args.brokers)
    }

    /// Bytes per second a broker may move each way before the plan warns.
    pub fn nic_limit_bytes_per_sec(&self) -> f64 {
        self.args.nic_gbps * 1e9 / 8.0 * NIC_PLANNED_FRACTION
    }
}

/// Computes the plan, or says which flag is wrong and what to give instead.
pub fn plan(args: &PlanArgs) -> Result<Plan, String> {
    validate(args)?;
    let ratio = args.compression_ratio;
    let record_bytes = (args.size_bytes as f64 + RECORD_OVERHEAD_BYTES) / ratio;
    let records_per_batch = ((PRODUCER_BATCH_BYTES - BATCH_HEADER_BYTES) / record_bytes)
        .floor()
        .max(1.0) as u64;
    let stored_bytes_per_message = record_bytes + BATCH_HEADER_BYTES / records_per_batch as f64;

    let raw_bytes_per_sec = args.rate * args.size_bytes as f64 / ratio;
    let wire_bytes_per_sec = args.rate * stored_bytes_per_message;
    let replica_seconds = args.retention_ms as f64 / 1000.0 * f64::from(args.rf) / f64::from(args.brokers);
    let index_factor = 1.0 + INDEX_ENTRY_BYTES / INDEX_INTERVAL_BYTES;
    let network = Flows::per_broker(wire_bytes_per_sec, args);
    let catch_up_seconds = args.catch_up_seconds as f64;

    let mut plan = Plan {
        args: args.clone(),
        records_per_batch,
        stored_bytes_per_message,
        disk_raw_per_broker_bytes: raw_bytes_per_sec * replica_seconds,
        disk_per_broker_bytes: wire_bytes_per_sec * replica_seconds * index_factor,
        network_raw: Flows::per_broker(raw_bytes_per_sec, args),
        network,
        page_cache_per_broker_bytes: network.total_in() * catch_up_seconds,
        page_cache_leader_per_broker_bytes: network.producer_in * catch_up_seconds,
        partitions: partition_count(wire_bytes_per_sec, args),
        warnings: Vec::new(),
    };
    plan.warnings = warnings(&plan);
    Ok(plan)
}

/// Prints the report to stdout, or the error to stderr with exit code 2.
pub fn run(args: &PlanArgs) -> ExitCode {
    match plan(args) {
        Ok(plan) => {
            // A closed pipe (`sluice plan | head`) is not worth a panic.
            let _ = write!(std::io::stdout().lock(), "{plan}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("sluice plan: {message}");
            ExitCode::from(2)
        }
    }
}

fn validate(args: &PlanArgs) -> Result<(), String> {
    let positive = |value: f64| value.is_finite() && value > 0.0;
    if !positive(args.rate) {
        return Err(format!(
            "--rate {} is not a produce rate: give the peak messages per second across all producers, above 0",
            args.rate
        ));
    }
    if args.size_bytes == 0 {
        return Err("--size 0 is not a message size: give the average key plus value bytes of one message".into());
    }
    if args.brokers == 0 {
        return Err("--brokers 0 leaves nothing to plan: give the number of brokers, at least 1".into());
    }
    if args.rf == 0 {
        return Err("--rf 0 would store nothing: give a replication factor of at least 1 (3 is usual)".into());
    }
    if args.rf > args.brokers {
        return Err(format!(
            "--rf {} is more than --brokers {}: every replica of a partition needs its own broker, \
             so give at least {} brokers or a lower replication factor",
            args.rf, args.brokers, args.rf
        ));
    }
    if args.retention_ms == 0 {
        return Err("--retention 0 keeps nothing: give how long the log is kept, e.g. 168h or 7d".into());
    }
    if args.disk_per_broker_bytes == 0 {
        return Err("--disk-per-broker 0 leaves no room: give one broker's usable log capacity, e.g. 16TB".into());
    }
    if !positive(args.nic_gbps) {
        return Err(format!(
            "--nic-gbps {} is not a NIC speed: give gigabits per second above 0, e.g. 10 or 25",
            args.nic_gbps
        ));
    }
    if args.catch_up_seconds == 0 {
        return Err(
            "--catch-up-seconds 0 sizes no page cache: give how many seconds of log consumers may lag, e.g. 300".into(),
        );
    }
    if !positive(args.partition_mbps) {
        return Err(format!(
            "--partition-mbps {} is not a throughput: give megabytes per second one partition may carry, e.g. 10",
            args.partition_mbps
        ));
    }
    if !(args.compression_ratio.is_finite() && args.compression_ratio >= 1.0) {
        return Err(format!(
            "--compression-ratio {} is below 1: it is uncompressed size divided by compressed size, \
             so give 1.0 for none or e.g. 2.0 for data that halves",
            args.compression_ratio
        ));
    }
    Ok(())
}

fn partition_count(produced_bytes_per_sec: f64, args: &PlanArgs) -> u64 {
    let for_throughput = (produced_bytes_per_sec / (args.partition_mbps * 1e6)).ceil().max(1.0) as u64;
    let brokers = u64::from(args.brokers);
    for_throughput.div_ceil(brokers).saturating_mul(brokers)
}

/// Brokers that bring a load `overload` times the limit under it, leaders spread evenly.
fn brokers_needed(args: &PlanArgs, overload: f64) -> u64 {
    (f64::from(args.brokers) * overload).ceil() as u64
}

fn warnings(plan: &Plan) -> Vec<String> {
    let args = &plan.args;
    let mut warnings = Vec::new();
    let disk = args.disk_per_broker_bytes as f64;
    if plan.disk_per_broker_bytes > disk {
        let overload = plan.disk_per_broker_bytes / disk;
        warnings.push(format!(
            "disk: each broker needs {} but has {}. Add brokers ({} hold this retention), lower --retention \
             to {} or less, or compress at the producer (lz4 or zstd) and rerun with the --compression-ratio \
             your data reaches.",
            fmt_bytes(plan.disk_per_broker_bytes),
            fmt_bytes(disk),
            brokers_needed(args, overload),
            fmt_duration_ms((args.retention_ms as f64 / overload).floor() as u64),
        ));
    }
    let limit = plan.nic_limit_bytes_per_sec();
    let percent = NIC_PLANNED_FRACTION * 100.0;
    if plan.network.total_in() > limit {
        warnings.push(format!(
            "network in: each broker takes in {:.3} Gbit/s, more than {percent:.0}% of its {} Gbit/s NIC. \
             Add brokers ({} spread it under {percent:.0}%) or compress at the producer; retention does not change it.",
            gbit(plan.network.total_in()),
            args.nic_gbps,
            brokers_needed(args, plan.network.total_in() / limit),
        ));
    }
    if plan.network.total_out() > limit {
        warnings.push(format!(
            "network out: each broker sends {:.3} Gbit/s, more than {percent:.0}% of its {} Gbit/s NIC. \
             Add brokers ({} spread it under {percent:.0}%), compress at the producer, \
             or have fewer consumer groups read the full stream.",
            gbit(plan.network.total_out()),
            args.nic_gbps,
            brokers_needed(args, plan.network.total_out() / limit),
        ));
    }
    warnings
}

/// `--retention` units, in milliseconds.
const DURATION_UNITS: [(&str, u64); 5] = [
    ("ms", 1),
    ("s", 1_000),
    ("m", 60_000),
    ("h", 3_600_000),
    ("d", 86_400_000),
];
/// `--disk-per-broker` units, in bytes: decimal, as disks are sold, and binary.
#[rustfmt::skip]
const SIZE_UNITS: [(&str, f64); 10] = [
    ("B", 1.0), ("KB", 1e3), ("MB", 1e6), ("GB", 1e9), ("TB", 1e12), ("PB", 1e15),
    ("KiB", 1024.0), ("MiB", 1048576.0), ("GiB", 1073741824.0), ("TiB", 1099511627776.0),
];

/// Parses `168h`, `7d`, `30m`, `3600s` or `500ms` into milliseconds. A bare number is refused:
/// Kafka's `retention.ms` counts milliseconds and people often mean hours.
pub fn parse_duration_ms(text: &str) -> Result<u64, String> {
    let (number, unit) = split_number(text);
    let count: u64 = number.parse().map_err(|_| {
        format!("'{text}' is not a duration: write a whole number and a unit, e.g. 168h, 7d, 30m or 3600s")
    })?;
    let unit_ms = find_unit(text, unit, &DURATION_UNITS, "168h or 7d")?;
    count
        .checked_mul(unit_ms)
        .ok_or_else(|| format!("'{text}' is too long to count in milliseconds: give a shorter one"))
}

/// Parses `16TB`, `500GB`, `1.5TB` or `4TiB` into bytes. A unit is required, so that `16` cannot
/// silently mean 16 bytes.
pub fn parse_size_bytes(text: &str) -> Result<u64, String> {
    let (number, unit) = split_number(text);
    let count: f64 = number
        .parse()
        .map_err(|_| format!("'{text}' is not a size: write a number and a unit, e.g. 16TB or 500GB"))?;
    let bytes = (count * find_unit(text, unit, &SIZE_UNITS, "16TB or 500GB")?).round();
    if bytes >= u64::MAX as f64 {
        return Err(format!(
            "'{text}' is too large to count in bytes: give a size below 18 EB"
        ));
    }
    Ok(bytes as u64)
}

/// Splits `text` where its leading run of digits and dots ends: `1.5TB` is `1.5` and `TB`.
fn split_number(text: &str) -> (&str, &str) {
    let text = text.trim();
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(end);
    (number, unit.trim())
}

/// The scale of `unit` (any case), or an error for `text` naming the units there are.
fn find_unit<T: Copy>(text: &str, unit: &str, units: &[(&str, T)], example: &str) -> Result<T, String> {
    if let Some((_, scale)) = units.iter().find(|(name, _)| name.eq_ignore_ascii_case(unit)) {
        return Ok(*scale);
    }
    let known = units.iter().map(|(name, _)| *name).collect::<Vec<_>>().join(", ");
    match unit {
        "" => Err(format!("'{text}' has no unit: add one of {known}, e.g. {example}")),
        _ => Err(format!(
            "'{text}' has the unknown unit '{unit}': use one of {known}, e.g. {example}"
        )),
    }
}

/// Decimal units, two decimals: `12.39 TB`.
pub fn fmt_bytes(bytes: f64) -> String {
    const UNITS: [(&str, f64); 5] = [("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)];
    match UNITS.iter().find(|(_, scale)| bytes >= *scale) {
        Some((unit, scale)) => format!("{:.2} {unit}", bytes / scale),
        None => format!("{bytes:.0} B"),
    }
}

/// The largest whole unit not longer than `ms`, in the form `--retention` accepts.
fn fmt_duration_ms(ms: u64) -> String {
    match ms {
        ms if ms >= 3_600_000 => format!("{}h", ms / 3_600_000),
        ms if ms >= 60_000 => format!("{}m", ms / 60_000),
        ms if ms >= 1_000 => format!("{}s", ms / 1_000),
        ms => format!("{ms}ms"),
    }
}

fn mb(bytes_per_sec: f64) -> f64 {
    bytes_per_sec / 1e6
}

fn gbit(bytes_per_sec: f64) -> f64 {
    bytes_per_sec * 8.0 / 1e9
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a = &self.args;
        let retention = fmt_duration_ms(a.retention_ms);
        let (rate, size, rf, groups, brokers) = (a.rate, a.size_bytes, a.rf, a.groups, a.brokers);
        writeln!(
            f,
            "sluice plan: {rate} msg/s of {size} B, RF {rf}, retention {retention}, \
             {groups} consumer group(s), {brokers} broker(s)\n"
        )?;

        let disk = a.disk_per_broker_bytes as f64;
        let used = format!("{:.1}% used", self.disk_per_broker_bytes / disk * 100.0);
        writeln!(f, "{:<30}{:>14}{:>14}", "Disk", "per broker", "cluster")?;
        for (label, per_broker, note) in [
            ("raw", self.disk_raw_per_broker_bytes, ""),
            ("with overheads", self.disk_per_broker_bytes, ""),
            ("available", disk, used.as_str()),
        ] {
            let cluster = per_broker * f64::from(brokers);
            let line = format!(
                "  {label:<28}{:>14}{:>14}   {note}",
                fmt_bytes(per_broker),
                fmt_bytes(cluster)
            );
            writeln!(f, "{}", line.trim_end())?;
        }

        let nic = a.nic_gbps * 1e9 / 8.0;
        writeln!(
            f,
            "\n{:<30}{:>14}{:>14}{:>14}",
            "Network per broker", "raw MB/s", "wire MB/s", "wire Gbit/s"
        )?;
        for ((label, raw, total), (_, wire, _)) in self.network_raw.rows().into_iter().zip(self.network.rows()) {
            write!(
                f,
                "  {label:<28}{:>14.2}{:>14.2}{:>14.3}",
                mb(raw),
                mb(wire),
                gbit(wire)
            )?;
            if total {
                write!(f, "   {:.1}% of the {} Gbit/s NIC", wire / nic * 100.0, a.nic_gbps)?;
            }
            writeln!(f)?;
        }

        let cache = fmt_bytes(self.page_cache_per_broker_bytes);
        let leader = fmt_bytes(self.page_cache_leader_per_broker_bytes);
        let catch_up = a.catch_up_seconds;
        writeln!(
            f,
            "\n{:<30}{cache:>14}   {catch_up} s of all replicas' writes; {leader} of it is leader data consumers read",
            "Page cache per broker"
        )?;
        let per_partition = mb(self.network.producer_in * f64::from(brokers) / self.partitions as f64);
        let planned = a.partition_mbps;
        writeln!(
            f,
            "{:<30}{:>14}   {per_partition:.2} MB/s each (planned: {planned} MB/s), a multiple of {brokers} brokers\n",
            "Partitions", self.partitions
        )?;

        match self.warnings.as_slice() {
            [] => writeln!(f, "Warnings: none")?,
            warnings => {
                writeln!(f, "Warnings:")?;
                for warning in warnings {
                    writeln!(f, "  - {warning}")?;
                }
            }
        }
        self.fmt_model(f)
    }
}

impl Plan {
    /// The footer: the model behind the figures, with this plan's numbers filled in.
    fn fmt_model(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (records, brokers) = (self.records_per_batch, self.args.brokers);
        let fan_out = self.args.rf - 1 + self.args.groups;
        let nic_percent = NIC_PLANNED_FRACTION * 100.0;
        let (record, header, batch) = (RECORD_OVERHEAD_BYTES, BATCH_HEADER_BYTES, PRODUCER_BATCH_BYTES);
        let (index, interval) = (INDEX_ENTRY_BYTES, INDEX_INTERVAL_BYTES);
        writeln!(
            f,
            "\nModel (docs/capacity-planning.md):\n  \
             disk raw = rate x size x retention x RF / compression ratio, spread evenly over the brokers.\n  \
             disk with overheads adds {record} B of record framing per message, a {header} B batch header\n    \
             shared by the {records} messages of a full {batch} B producer batch, and {index} B of offset and\n    \
             time index per {interval} B of log. Not counted: the active segment kept past retention,\n    \
             room for reassignments.\n  \
             network: each produced byte enters a leader once, leaves it RF-1 times to followers and once\n    \
             per consumer group (fan-out {fan_out}); followers take it in; leaders spread evenly, so each\n    \
             broker carries 1/{brokers} of every flow. TCP/IP and request headers are not counted; warnings\n    \
             above {nic_percent:.0}% of the NIC.\n  \
             page cache = a broker's leader and follower writes over --catch-up-seconds: the kernel\n    \
             caches every write and evicts by age, not by whether a consumer will read it.\n  \
             partitions: at least one per broker, none above --partition-mbps, a multiple of the brokers."
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        plan: PlanArgs,
    }

    fn parse(flags: &str) -> PlanArgs {
        let argv = std::iter::once("sluice-plan").chain(flags.split_whitespace());
        Cli::try_parse_from(argv)
            .unwrap_or_else(|e| panic!("{flags}: {e}"))
            .plan
    }

    const EXAMPLE: &str = "--rate 20000 --size 2048 --rf 3 --retention 168h --groups 2 --brokers 6";

    fn assert_close(actual: f64, expected: f64, what: &str) {
        let tolerance = expected.abs() * 1e-9;
        assert!(
            (actual - expected).abs() <= tolerance,
            "{what}: {actual} is not {expected}"
        );
    }

    #[test]
    fn issue_example_needs_12_386_tb_per_broker_raw_and_fans_out_four_times() {
        let plan = plan(&parse(EXAMPLE)).unwrap();
        // 20000 x 2048 B x 604800 s x 3 / 6.
        assert_close(
            plan.disk_raw_per_broker_bytes,
            12_386_304_000_000.0,
            "raw disk per broker",
        );
        assert_close(
            plan.disk_raw_cluster_bytes(),
            74_317_824_000_000.0,
            "raw disk in the cluster",
        );
        // 2060 B records, 7 to a 16384 B batch: 2060 + 61/7 B each, then 20 B of index per 4096 B.
        assert_eq!(plan.records_per_batch, 7);
        assert_close(
            plan.stored_bytes_per_message,
            2060.0 + 61.0 / 7.0,
            "stored bytes per message",
        );
        assert_close(
            plan.disk_per_broker_bytes,
            12_572_675_718_750.0,
            "disk per broker with overheads",
        );
        // 40.96 MB/s produced, 1/6 of it per broker.
        let share = 40_960_000.0 / 6.0;
        assert_close(plan.network_raw.producer_in, share, "producer in");
        assert_close(plan.network_raw.replication_in, 2.0 * share, "replication in");
        assert_close(plan.network_raw.replication_out, 2.0 * share, "replication out");
        assert_close(plan.network_raw.consumer_out, 2.0 * share, "consumer out");
        assert_close(
            plan.network_raw.total_out(),
            4.0 * share,
            "leader out = (RF-1+groups) x 40.96 MB/s / 6",
        );
        assert!((mb(plan.network_raw.producer_in) - 6.83).abs() < 0.005);
        assert!((mb(plan.network_raw.total_out()) - 27.31).abs() < 0.005);
        assert_close(
            plan.network.producer_in,
            20_000.0 * plan.stored_bytes_per_message / 6.0,
            "producer in on the wire",
        );
        // 3 x 6.8957 MB/s written per broker for 300 s; a third of it is leader data.
        assert_close(plan.page_cache_per_broker_bytes, 6_206_142_857.142_858, "page cache");
        assert_close(
            plan.page_cache_leader_per_broker_bytes,
            2_068_714_285.714_286,
            "leader page cache",
        );
        // 41.37 MB/s / 10 MB/s = 5 partitions, rounded up to the 6 brokers.
        assert_eq!(plan.partitions, 6);
        assert!(plan.warnings.is_empty(), "{:?}", plan.warnings);
    }

    #[test]
    fn issue_example_report_shows_raw_and_overhead_figures() {
        let report = plan(&parse(EXAMPLE)).unwrap().to_string();
        println!("{report}");
        for expected in [
            "12.39 TB",
            "74.32 TB",
            "12.57 TB",
            "6.83",
            "13.65",
            "27.31",
            "6.21 GB",
            "Warnings: none",
        ] {
            assert!(report.contains(expected), "no {expected} in\n{report}");
        }
        assert!(report.contains("fan-out 4"), "{report}");
    }

    #[test]
    fn single_broker_rf1_has_no_replication_traffic() {
        let plan = plan(&parse("--rate 1000 --size 1000 --rf 1 --brokers 1 --retention 1h")).unwrap();
        assert_close(plan.disk_raw_per_broker_bytes, 3_600_000_000.0, "1 MB/s for an hour");
        assert_close(plan.network_raw.producer_in, 1_000_000.0, "producer in");
        assert_eq!(plan.network_raw.replication_in, 0.0);
        assert_eq!(plan.network_raw.replication_out, 0.0);
        assert_close(plan.network_raw.consumer_out, 1_000_000.0, "one group reads it all");
        assert_close(
            plan.page_cache_per_broker_bytes,
            plan.page_cache_leader_per_broker_bytes,
            "all data is leader data",
        );
        assert_eq!(plan.partitions, 1);
        assert!(plan.warnings.is_empty(), "{:?}", plan.warnings);
    }

    #[test]
    fn partitions_cover_throughput_in_multiples_of_the_brokers() {
        // 100000 x 1012 B + batch headers = 101.4 MB/s: 11 partitions of 10 MB/s, rounded to 12.
        let plan = plan(&parse("--rate 100000 --size 1000 --brokers 6")).unwrap();
        assert_eq!(plan.partitions, 12);
        let plan = super::plan(&parse("--rate 100000 --size 1000 --brokers 6 --partition-mbps 50")).unwrap();
        assert_eq!(plan.partitions, 6);
    }

    #[test]
    fn compression_divides_disk_and_network() {
        let plain = plan(&parse(EXAMPLE)).unwrap();
        let halved = plan(&parse(&format!("{EXAMPLE} --compression-ratio 2"))).unwrap();
        assert_close(
            halved.disk_raw_per_broker_bytes,
            plain.disk_raw_per_broker_bytes / 2.0,
            "raw disk",
        );
        assert_close(
            halved.network_raw.total_in(),
            plain.network_raw.total_in() / 2.0,
            "raw network in",
        );
        // Compressed records fill a batch twice as fast, so the header is shared by more of them.
        assert_eq!(halved.records_per_batch, 15);
        assert!(halved.disk_per_broker_bytes < plain.disk_per_broker_bytes / 2.0 * 1.02);
    }

    #[test]
    fn small_disks_warn_with_brokers_and_retention_that_fit() {
        let plan = plan(&parse(&format!("{EXAMPLE} --disk-per-broker 10TB"))).unwrap();
        assert_eq!(plan.warnings.len(), 1, "{:?}", plan.warnings);
        let warning = &plan.warnings[0];
        // 12.57 TB / 10 TB x 6 brokers = 7.54; 168h / 1.257 = 133.6h.
        assert!(warning.starts_with("disk:"), "{warning}");
        assert!(warning.contains("Add brokers (8 hold"), "{warning}");
        assert!(warning.contains("--retention to 133h"), "{warning}");
        assert!(warning.contains("compress"), "{warning}");
    }

    #[test]
    fn slow_nic_warns_about_network_out_only_when_only_out_is_over() {
        // In 20.69 MB/s = 0.166 Gbit/s, out 27.58 MB/s = 0.221 Gbit/s; 70% of 0.25 Gbit/s is 0.175.
        let plan = plan(&parse(&format!("{EXAMPLE} --nic-gbps 0.25"))).unwrap();
        assert_eq!(plan.warnings.len(), 1, "{:?}", plan.warnings);
        assert!(plan.warnings[0].starts_with("network out:"), "{}", plan.warnings[0]);
        assert!(
            plan.warnings[0].contains("Add brokers (8 spread it"),
            "{}",
            plan.warnings[0]
        );
    }

    #[test]
    fn slow_nic_warns_about_network_in_when_nobody_reads() {
        // No consumer groups: out is replication only (0.110 Gbit/s); in stays 0.166; limit 0.14.
        let plan = plan(&parse(
            "--rate 20000 --size 2048 --rf 3 --groups 0 --brokers 6 --nic-gbps 0.2",
        ))
        .unwrap();
        assert_eq!(plan.warnings.len(), 1, "{:?}", plan.warnings);
        assert!(plan.warnings[0].starts_with("network in:"), "{}", plan.warnings[0]);
        assert!(
            plan.warnings[0].contains("Add brokers (8 spread it"),
            "{}",
            plan.warnings[0]
        );
        assert!(plan.to_string().contains("  - network in:"));
    }

    #[test]
    fn defaults_are_the_documented_assumptions() {
        let args = parse("--rate 1 --size 1");
        assert_eq!((args.rf, args.groups, args.brokers), (3, 1, 3));
        assert_eq!(args.retention_ms, 604_800_000);
        assert_eq!(args.disk_per_broker_bytes, 16_000_000_000_000);
        assert_eq!((args.nic_gbps, args.catch_up_seconds), (10.0, 300));
        assert_eq!((args.partition_mbps, args.compression_ratio), (10.0, 1.0));
        assert!(
            Cli::try_parse_from(["sluice-plan", "--size", "1"]).is_err(),
            "--rate is required"
        );
        assert!(
            Cli::try_parse_from(["sluice-plan", "--rate", "1"]).is_err(),
            "--size is required"
        );
    }

    #[test]
    fn durations_take_a_unit() {
        assert_eq!(parse_duration_ms("168h"), Ok(604_800_000));
        assert_eq!(parse_duration_ms("7d"), Ok(604_800_000));
        assert_eq!(parse_duration_ms("30m"), Ok(1_800_000));
        assert_eq!(parse_duration_ms("3600s"), Ok(3_600_000));
        assert_eq!(parse_duration_ms("250ms"), Ok(250));
        assert_eq!(parse_duration_ms(" 2 H "), Ok(7_200_000));
        for bad in ["168", "h", "", "-1h", "1.5h", "7days", "99999999999999999999d"] {
            let error = parse_duration_ms(bad).unwrap_err();
            assert!(error.contains(": "), "{bad}: {error}");
            assert!(error.contains("e.g.") || error.contains("shorter"), "{bad}: {error}");
        }
        assert!(parse_duration_ms("168").unwrap_err().contains("no unit"));
    }

    #[test]
    fn sizes_take_a_decimal_or_binary_unit() {
        assert_eq!(parse_size_bytes("16TB"), Ok(16_000_000_000_000));
        assert_eq!(parse_size_bytes("500GB"), Ok(500_000_000_000));
        assert_eq!(parse_size_bytes("1.5tb"), Ok(1_500_000_000_000));
        assert_eq!(parse_size_bytes("4TiB"), Ok(4 << 40));
        assert_eq!(parse_size_bytes("512 B"), Ok(512));
        for bad in ["16", "TB", "16XB", "-1TB", "1.2.3GB", "99999999PB", "1e9PB"] {
            let error = parse_size_bytes(bad).unwrap_err();
            assert!(error.contains("e.g.") || error.contains("below"), "{bad}: {error}");
        }
        assert!(parse_size_bytes("16").unwrap_err().contains("no unit"));
    }

    #[test]
    fn zero_negative_and_impossible_inputs_are_refused() {
        let refused = |flags: &str, says: &str| {
            let error = plan(&parse(flags)).unwrap_err();
            assert!(error.contains(says), "{flags}: {error}");
        };
        refused("--rate 0 --size 1", "--rate 0 is not a produce rate");
        refused("--rate=-5 --size 1", "above 0");
        refused("--rate NaN --size 1", "above 0");
        refused("--rate 1 --size 0", "--size 0");
        refused("--rate 1 --size 1 --brokers 0", "--brokers 0");
        refused("--rate 1 --size 1 --rf 0", "--rf 0");
        refused("--rate 1 --size 1 --rf 4", "--rf 4 is more than --brokers 3");
        refused(
            "--rate 1 --size 1 --rf 4",
            "give at least 4 brokers or a lower replication factor",
        );
        refused("--rate 1 --size 1 --retention 0h", "--retention 0");
        refused("--rate 1 --size 1 --disk-per-broker 0TB", "--disk-per-broker 0");
        refused("--rate 1 --size 1 --nic-gbps 0", "--nic-gbps 0");
        refused("--rate 1 --size 1 --catch-up-seconds 0", "--catch-up-seconds 0");
        refused("--rate 1 --size 1 --partition-mbps=-1", "--partition-mbps -1");
        refused(
            "--rate 1 --size 1 --compression-ratio 0.5",
            "uncompressed size divided by compressed size",
        );
    }

    #[test]
    fn bytes_print_in_decimal_units() {
        assert_eq!(fmt_bytes(999.0), "999 B");
        assert_eq!(fmt_bytes(1_500.0), "1.50 KB");
        assert_eq!(fmt_bytes(6_206_142_857.0), "6.21 GB");
        assert_eq!(fmt_bytes(12_386_304_000_000.0), "12.39 TB");
        assert_eq!(fmt_bytes(2.5e15), "2.50 PB");
        assert_eq!(fmt_duration_ms(481_000_000), "133h");
        assert_eq!(fmt_duration_ms(90_000), "1m");
    }
}
