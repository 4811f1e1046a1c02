//! The transaction rows (compat/README.md): a transactional producer committing and aborting,
//! read_committed consumers held at the last stable offset, and consume-transform-produce with
//! the consumed offsets sent to the transaction. librdkafka's transactional calls block; the
//! runtime is multi-threaded and rows run one at a time, so they are called directly.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

use crate::client::*;
use crate::Opts;

const TX_CALL: Duration = Duration::from_secs(30);
const OPEN_TX_WATCH: Duration = Duration::from_secs(3);
const CTP_INPUTS: usize = 20;
const CTP_TX_SIZE: usize = 10;
const CTP_ABORTED: usize = 5;

fn values(tag: &str, n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| format!("{tag}-{i}").into_bytes()).collect()
}

fn texts(values: &[Vec<u8>]) -> Vec<String> {
    values.iter().map(|v| String::from_utf8_lossy(v).into_owned()).collect()
}

fn same(what: &str, want: &[Vec<u8>], got: &[TestRecord]) -> Result<()> {
    let got: Vec<Vec<u8>> = got.iter().map(|r| r.value.clone()).collect();
    ensure!(
        got == want,
        "{what}: read {:?}, expected {:?}",
        texts(&got),
        texts(want)
    );
    Ok(())
}

fn tx_producer(opts: &Opts, name: &str) -> Result<FutureProducer> {
    let id = format!("{}{name}", opts.prefix);
    let p = producer(opts, &[("transactional.id", &id)])?;
    p.init_transactions(TX_CALL).context("init_transactions")?;
    Ok(p)
}

/// Sends `values` to partition 0 in the open transaction and waits for every acknowledgement
/// (an abort would purge records still queued; the rows need the aborted ones in the log).
async fn tx_send(p: &FutureProducer, topic: &str, values: &[Vec<u8>]) -> Result<()> {
    let mut deliveries = Vec::with_capacity(values.len());
    for v in values {
        let record: FutureRecord<'_, (), Vec<u8>> = FutureRecord::to(topic).partition(0).payload(v);
        deliveries.push(p.send_result(record).map_err(|(e, _)| e).context("enqueue a record")?);
    }
    for (i, d) in deliveries.into_iter().enumerate() {
        d.await
            .context("producer dropped a delivery report")?
            .map_err(|(e, _)| e)
            .with_context(|| format!("delivery of transactional record {i}"))?;
    }
    Ok(())
}

async fn in_transaction(p: &FutureProducer, topic: &str, values: &[Vec<u8>], commit: bool) -> Result<()> {
    p.begin_transaction().context("begin_transaction")?;
    tx_send(p, topic, values).await?;
    end(p, commit)
}

fn end(p: &FutureProducer, commit: bool) -> Result<()> {
    if commit {
        p.commit_transaction(TX_CALL).context("commit_transaction")
    } else {
        p.abort_transaction(TX_CALL).context("abort_transaction")
    }
}

fn isolated_reader(opts: &Opts, topic: &str, isolation: &str) -> Result<StreamConsumer> {
    let group = format!("{}{isolation}-reader", opts.prefix);
    let c: StreamConsumer = config(
        opts,
        &[
            ("group.id", &group),
            ("enable.auto.commit", "false"),
            ("isolation.level", isolation),
        ],
    )
    .create()
    .context("cannot create the consumer")?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)?;
    c.assign(&tpl)?;
    Ok(c)
}

fn position(c: &StreamConsumer, topic: &str) -> Result<i64> {
    let tpl = c.position()?;
    Ok(match tpl.find_partition(topic, 0).map(|e| e.offset()) {
        Some(Offset::Offset(o)) => o,
        _ => -1,
    })
}

/// Reads exactly `want` from the beginning at `isolation`, then nothing more until the
/// consumer's position reaches its end offset (past the transaction markers).
async fn read_isolated(opts: &Opts, topic: &str, isolation: &str, want: &[Vec<u8>]) -> Result<()> {
    let c = isolated_reader(opts, topic, isolation)?;
    let got = receive(&c, want.len(), Duration::from_secs(25)).await?;
    same(isolation, want, &got)?;
    let (_, end_offset) = c.fetch_watermarks(topic, 0, CALL)?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while position(&c, topic)? < end_offset {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "{isolation}: position {} did not reach the end offset {end_offset}",
            position(&c, topic)?
        );
        if let Ok(m) = tokio::time::timeout(Duration::from_millis(200), c.recv()).await {
            let m = m.context("consumer error")?;
            anyhow::bail!(
                "{isolation}: an extra record at offset {}",
                rdkafka::Message::offset(&m)
            );
        }
    }
    Ok(())
}

pub async fn commit_abort(opts: &Opts) -> Result<String> {
    let topic = format!("{}tx-commit-abort", opts.prefix);
    create_topic(opts, &topic, 1).await?;
    let (first, aborted, second) = (values("c1", 10), values("a", 10), values("c2", 5));
    let p = tx_producer(opts, "tx-commit-abort")?;
    in_transaction(&p, &topic, &first, true).await?;
    in_transaction(&p, &topic, &aborted, false).await?;
    in_transaction(&p, &topic, &second, true).await?;
    let committed: Vec<Vec<u8>> = first.iter().chain(&second).cloned().collect();
    read_isolated(opts, &topic, "read_committed", &committed).await?;
    let all: Vec<Vec<u8>> = first.iter().chain(&aborted).chain(&second).cloned().collect();
    read_isolated(opts, &topic, "read_uncommitted", &all).await?;
    Ok(String::new())
}

pub async fn read_committed(opts: &Opts) -> Result<String> {
    let topic = format!("{}read-committed", opts.prefix);
    create_topic(opts, &topic, 1).await?;
    let (before, open) = (values("before", 5), values("open", 5));
    let p = tx_producer(opts, "read-committed")?;
    in_transaction(&p, &topic, &before, true).await?;
    p.begin_transaction().context("begin_transaction")?;
    tx_send(&p, &topic, &open).await?;
    let c = isolated_reader(opts, &topic, "read_committed")?;
    same(
        "before the open transaction",
        &before,
        &receive(&c, before.len(), Duration::from_secs(25)).await?,
    )?;
    let (_, lso) = c.fetch_watermarks(&topic, 0, CALL)?;
    ensure!(
        lso == before.len() as i64 + 1,
        "read_committed end offset {lso} with a transaction open, expected {} (the last stable offset)",
        before.len() + 1
    );
    // A bounded look: nothing of the open transaction may arrive.
    if let Ok(m) = tokio::time::timeout(OPEN_TX_WATCH, c.recv()).await {
        let m = m.context("consumer error")?;
        anyhow::bail!(
            "delivered the record at offset {} of the open transaction",
            rdkafka::Message::offset(&m)
        );
    }
    end(&p, true)?;
    same(
        "after the commit",
        &open,
        &receive(&c, open.len(), Duration::from_secs(25)).await?,
    )?;
    Ok(String::new())
}

pub async fn consume_transform_produce(opts: &Opts) -> Result<String> {
    let (source, sink) = (format!("{}ctp-in", opts.prefix), format!("{}ctp-out", opts.prefix));
    let group = format!("{}ctp", opts.prefix);
    create_topic(opts, &source, 1).await?;
    create_topic(opts, &sink, 1).await?;
    let inputs = values("in", CTP_INPUTS + CTP_ABORTED);
    let plain = producer(opts, &[])?;
    tx_send(&plain, &source, &inputs[..CTP_INPUTS]).await?;
    let c: StreamConsumer = config(
        opts,
        &[
            ("group.id", &group),
            ("auto.offset.reset", "earliest"),
            ("enable.auto.commit", "false"),
            ("isolation.level", "read_committed"),
        ],
    )
    .create()
    .context("cannot create the group consumer")?;
    c.subscribe(&[source.as_str()]).context("subscribe")?;
    let p = tx_producer(opts, "ctp")?;
    // A read_committed librdkafka consumer asks OffsetFetch with require_stable.
    let committed = |c: &StreamConsumer| -> Result<i64> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&source, 0);
        let got = c.committed_offsets(tpl, CALL)?;
        Ok(match got.find_partition(&source, 0).map(|e| e.offset()) {
            Some(Offset::Offset(o)) => o,
            _ => -1,
        })
    };
    for round in 0..=CTP_INPUTS / CTP_TX_SIZE {
        let commit = round < CTP_INPUTS / CTP_TX_SIZE;
        if !commit {
            tx_send(&plain, &source, &inputs[CTP_INPUTS..]).await?;
        }
        let got = receive(
            &c,
            if commit { CTP_TX_SIZE } else { CTP_ABORTED },
            Duration::from_secs(25),
        )
        .await?;
        p.begin_transaction().context("begin_transaction")?;
        let out: Vec<Vec<u8>> = got
            .iter()
            .map(|r| [b"out-".as_slice(), r.value.as_slice()].concat())
            .collect();
        tx_send(&p, &sink, &out).await?;
        let next = got.last().map(|r| r.offset + 1).unwrap_or_default();
        {
            let mut offsets = TopicPartitionList::new();
            offsets.add_partition_offset(&source, 0, Offset::Offset(next))?;
            let cgm = c.group_metadata().context("the consumer has no group metadata")?;
            p.send_offsets_to_transaction(&offsets, &cgm, TX_CALL)
                .context("send_offsets_to_transaction")?;
        }
        end(&p, commit)?;
        let expected = if commit {
            ((round + 1) * CTP_TX_SIZE) as i64
        } else {
            CTP_INPUTS as i64
        };
        let at = committed(&c)?;
        ensure!(
            at == expected,
            "committed offset {at} after {} transaction {}, expected {expected}",
            if commit { "committed" } else { "aborted" },
            round + 1
        );
    }
    let want: Vec<Vec<u8>> = inputs[..CTP_INPUTS]
        .iter()
        .map(|v| [b"out-".as_slice(), v.as_slice()].concat())
        .collect();
    read_isolated(opts, &sink, "read_committed", &want).await?;
    Ok(String::new())
}
