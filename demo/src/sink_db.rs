//! The sink's SQLite database: the orders, the next offset of each partition they came from,
//! and counters. A batch of orders and the offsets after it are stored in one transaction,
//! so the table holds exactly the orders before the stored offsets, each once.
//!
//! ```sql
//! orders(order_id TEXT PRIMARY KEY, customer, amount_cents, created_ms, topic_partition, kafka_offset)
//! sink_offsets(topic, partition, next_offset)      -- PRIMARY KEY (topic, partition)
//! sink_stats(name, value)                          -- rows, duplicates, malformed, replays_skipped
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use rusqlite::{params, Connection, OpenFlags, OptionalExtension, TransactionBehavior};

use crate::order::Order;

const SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS orders (
        order_id TEXT PRIMARY KEY,
        customer TEXT NOT NULL,
        amount_cents INTEGER NOT NULL,
        created_ms INTEGER NOT NULL,
        topic_partition TEXT NOT NULL,
        kafka_offset INTEGER NOT NULL
    );
    CREATE TABLE IF NOT EXISTS sink_offsets (
        topic TEXT NOT NULL,
        partition INTEGER NOT NULL,
        next_offset INTEGER NOT NULL,
        PRIMARY KEY (topic, partition)
    );
    CREATE TABLE IF NOT EXISTS sink_stats (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
";

/// One record read from the topic, waiting in a batch.
#[derive(Debug)]
pub struct Pending {
    pub partition: i32,
    pub offset: i64,
    /// `None`: the value was not an order (counted as malformed, its offset still consumed).
    pub order: Option<Order>,
}

/// What the sink has done over its whole history, as `sink_stats` holds it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SinkCounters {
    /// Orders inserted.
    pub rows: i64,
    /// Records whose order id was already in the table: the topic holds the order twice.
    pub duplicates: i64,
    /// Records that were not orders.
    pub malformed: i64,
    /// Records below the stored offset, read again after a rebalance and not stored twice.
    pub replays_skipped: i64,
}

impl SinkCounters {
    /// Reads the counters of the database at `path` without writing to it (for `run` and tests).
    pub fn read(path: &Path) -> Result<SinkCounters> {
        let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
            .with_context(|| format!("cannot open the sink database {}", path.display()))?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        Self::load(&conn)
    }

    fn load(conn: &Connection) -> Result<SinkCounters> {
        let get = |name: &str| -> Result<i64> {
            Ok(conn
                .query_row("SELECT value FROM sink_stats WHERE name = ?1", [name], |r| r.get(0))
                .optional()?
                .unwrap_or(0))
        };
        Ok(SinkCounters {
            rows: get("rows")?,
            duplicates: get("duplicates")?,
            malformed: get("malformed")?,
            replays_skipped: get("replays_skipped")?,
        })
    }
}

/// Next offset per partition of `topic` as the database at `path` holds them (read-only).
pub fn read_next_offsets(path: &Path, topic: &str) -> Result<BTreeMap<i32, i64>> {
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .with_context(|| format!("cannot open the sink database {}", path.display()))?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    next_offsets(&conn, topic)
}

fn next_offsets(conn: &Connection, topic: &str) -> Result<BTreeMap<i32, i64>> {
    let mut stmt = conn.prepare_cached("SELECT partition, next_offset FROM sink_offsets WHERE topic = ?1")?;
    let rows = stmt.query_map([topic], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub struct SinkDb {
    conn: Connection,
    topic: String,
}

impl SinkDb {
    /// Opens (creating if needed) the database in WAL mode with `synchronous=FULL`: a
    /// committed transaction survives a crash of the process and of the machine.
    pub fn open(path: &Path, topic: &str) -> Result<SinkDb> {
        let conn = Connection::open(path)
            .with_context(|| format!("cannot open the sink database {}; check --db", path.display()))?;
        let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            anyhow::bail!(
                "{} cannot use WAL mode (got {mode}); put --db on a local file system",
                path.display()
            );
        }
        conn.execute_batch("PRAGMA synchronous = FULL;")?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        conn.execute_batch(SCHEMA)
            .with_context(|| format!("cannot create the sink tables in {}", path.display()))?;
        Ok(SinkDb {
            conn,
            topic: topic.to_string(),
        })
    }

    pub fn next_offsets(&self) -> Result<BTreeMap<i32, i64>> {
        next_offsets(&self.conn, &self.topic)
    }

    /// Stores `batch` and the offsets after it in one transaction. Records below a stored
    /// offset are already in the table (another member, or this one before a rebalance, got
    /// there first) and are skipped; an order id already in the table is a duplicate on the
    /// topic: it is counted and logged as an error, and the table keeps the first copy.
    pub fn store(&mut self, batch: &[Pending]) -> Result<SinkCounters> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut next = next_offsets(&tx, &self.topic)?;
        let mut added = SinkCounters::default();
        {
            let mut insert = tx.prepare_cached(
                "INSERT INTO orders (order_id, customer, amount_cents, created_ms, topic_partition, kafka_offset)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?;
            for p in batch {
                let next_offset = next.entry(p.partition).or_insert(0);
                if p.offset < *next_offset {
                    added.replays_skipped += 1;
                    continue;
                }
                *next_offset = p.offset + 1;
                let Some(order) = &p.order else {
                    added.malformed += 1;
                    continue;
                };
                let topic_partition = format!("{}-{}", self.topic, p.partition);
                match insert.execute(params![
                    order.order_id,
                    order.customer,
                    order.amount_cents,
                    order.created_ms,
                    topic_partition,
                    p.offset
                ]) {
                    Ok(_) => added.rows += 1,
                    Err(rusqlite::Error::SqliteFailure(e, _))
                        if e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY =>
                    {
                        added.duplicates += 1;
                        tracing::error!(
                            order_id = %order.order_id, %topic_partition, offset = p.offset,
                            "DUPLICATE ORDER: this order id is already in the table, so the topic holds it twice"
                        );
                    }
                    Err(e) => return Err(e).context("cannot insert an order"),
                }
            }
            let mut upsert = tx.prepare_cached(
                "INSERT INTO sink_offsets (topic, partition, next_offset) VALUES (?1, ?2, ?3)
                 ON CONFLICT (topic, partition) DO UPDATE SET next_offset = excluded.next_offset",
            )?;
            for (partition, offset) in &next {
                upsert.execute(params![self.topic, partition, offset])?;
            }
            let mut bump = tx.prepare_cached(
                "INSERT INTO sink_stats (name, value) VALUES (?1, ?2)
                 ON CONFLICT (name) DO UPDATE SET value = value + excluded.value",
            )?;
            for (name, value) in [
                ("rows", added.rows),
                ("duplicates", added.duplicates),
                ("malformed", added.malformed),
                ("replays_skipped", added.replays_skipped),
            ] {
                bump.execute(params![name, value])?;
            }
        }
        tx.commit().context("cannot commit a batch to the sink database")?;
        Ok(added)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(partition: i32, offset: i64, id: Option<&str>) -> Pending {
        Pending {
            partition,
            offset,
            order: id.map(|id| Order {
                order_id: id.into(),
                customer: "c".into(),
                amount_cents: 1,
                created_ms: 0,
            }),
        }
    }

    #[test]
    fn a_batch_read_again_is_skipped_and_a_duplicate_order_is_counted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("orders.db");
        let mut db = SinkDb::open(&path, "orders").unwrap();
        let batch = [pending(0, 0, Some("a")), pending(0, 1, None), pending(3, 7, Some("b"))];
        let added = db.store(&batch).unwrap();
        assert_eq!((added.rows, added.malformed, added.duplicates), (2, 1, 0));
        // Read again after a rebalance: already covered by the stored offsets.
        assert_eq!(db.store(&batch).unwrap().replays_skipped, 3);
        // The same order id at a new offset: the topic holds it twice.
        let added = db.store(&[pending(0, 2, Some("a"))]).unwrap();
        assert_eq!((added.rows, added.duplicates), (0, 1));
        assert_eq!(db.next_offsets().unwrap(), BTreeMap::from([(0, 3), (3, 8)]));
        drop(db);
        let counters = SinkCounters::read(&path).unwrap();
        assert_eq!(
            counters,
            SinkCounters {
                rows: 2,
                duplicates: 1,
                malformed: 1,
                replays_skipped: 3
            }
        );
        assert_eq!(
            read_next_offsets(&path, "orders").unwrap(),
            BTreeMap::from([(0, 3), (3, 8)])
        );
    }
}
