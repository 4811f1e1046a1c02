//! What a group member did (records, assignments, revocations, acknowledged commits, errors),
//! recorded in process or parsed back from a child process's stdout lines.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use anyhow::{bail, Context, Result};

/// One record a member received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub partition: i32,
    pub offset: i64,
    pub value: String,
}

/// A commit the coordinator acknowledged (a synchronous commit that returned Ok).
#[derive(Debug, Clone)]
pub struct AckedCommit {
    pub at_ms: i64,
    /// (partition, next offset to read)
    pub offsets: Vec<(i32, i64)>,
}

/// A partition assignment the member got from a rebalance.
#[derive(Debug, Clone)]
pub struct Assigned {
    pub at_ms: i64,
    pub partitions: Vec<i32>,
}

/// The first record a member received on a partition after an assignment.
#[derive(Debug, Clone)]
pub struct FirstAfterAssign {
    pub at_ms: i64,
    pub partition: i32,
    pub offset: i64,
}

/// Everything a member did, as the test sees it. In a child process each event is also written
/// to stdout as one line ([`MemberLog::to_line`]) and parsed back by the parent.
#[derive(Default)]
pub struct MemberLog {
    pub received: Mutex<Vec<Received>>,
    pub assignments: Mutex<Vec<Assigned>>,
    pub revocations: Mutex<Vec<i64>>,
    pub commits: Mutex<Vec<AckedCommit>>,
    pub firsts: Mutex<Vec<FirstAfterAssign>>,
    pub errors: Mutex<Vec<String>>,
    current: Mutex<(i64, Vec<i32>)>,
    /// Print each event to stdout (child-process mode).
    echo: bool,
    received_count: AtomicU64,
}

impl MemberLog {
    pub fn new(echo: bool) -> Self {
        Self {
            echo,
            ..Self::default()
        }
    }

    fn emit(&self, line: impl FnOnce() -> String) {
        if self.echo {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", line());
            let _ = out.flush();
        }
    }

    pub fn record(&self, r: Received) {
        self.emit(|| format!("record {} {} {}", r.partition, r.offset, r.value));
        self.received.lock().expect("lock").push(r);
        self.received_count.fetch_add(1, Ordering::Relaxed);
    }
    pub fn assigned(&self, a: Assigned) {
        self.emit(|| format!("assigned {} {}", a.at_ms, join(a.partitions.iter())));
        *self.current.lock().expect("lock") = (a.at_ms, a.partitions.clone());
        self.assignments.lock().expect("lock").push(a);
    }
    pub fn revoked(&self, at_ms: i64) {
        self.emit(|| format!("revoked {at_ms}"));
        *self.current.lock().expect("lock") = (at_ms, Vec::new());
        self.revocations.lock().expect("lock").push(at_ms);
    }
    pub fn committed(&self, c: AckedCommit) {
        self.emit(|| {
            format!(
                "committed {} {}",
                c.at_ms,
                join(c.offsets.iter().map(|(p, o)| format!("{p}:{o}")))
            )
        });
        self.commits.lock().expect("lock").push(c);
    }
    pub fn first(&self, f: FirstAfterAssign) {
        self.emit(|| format!("first {} {} {}", f.at_ms, f.partition, f.offset));
        self.firsts.lock().expect("lock").push(f);
    }
    pub fn error(&self, e: String) {
        self.emit(|| format!("error {}", e.replace('\n', " ")));
        let mut errors = self.errors.lock().expect("lock");
        if errors.len() >= 200 {
            errors.remove(0);
        }
        errors.push(e);
    }

    /// Applies one line written by a child process's [`MemberLog`].
    pub fn apply_line(&self, line: &str) -> Result<()> {
        let (kind, rest) = line.split_once(' ').unwrap_or((line, ""));
        let fields: Vec<&str> = rest.split(' ').collect();
        let int = |i: usize| -> Result<i64> {
            fields
                .get(i)
                .context("missing field")?
                .parse::<i64>()
                .with_context(|| format!("field {i} of {line:?}"))
        };
        let list = |i: usize| -> Vec<&str> {
            fields
                .get(i)
                .map_or(Vec::new(), |f| f.split(',').filter(|s| !s.is_empty()).collect())
        };
        match kind {
            "record" => self.record(Received {
                partition: int(0)? as i32,
                offset: int(1)?,
                value: fields.get(2).context("value")?.to_string(),
            }),
            "assigned" => self.assigned(Assigned {
                at_ms: int(0)?,
                partitions: list(1).iter().map(|p| p.parse()).collect::<Result<_, _>>()?,
            }),
            "revoked" => self.revoked(int(0)?),
            "committed" => self.committed(AckedCommit {
                at_ms: int(0)?,
                offsets: list(1)
                    .iter()
                    .map(|po| {
                        let (p, o) = po.split_once(':').context("p:o")?;
                        Ok((p.parse()?, o.parse()?))
                    })
                    .collect::<Result<_>>()?,
            }),
            "first" => self.first(FirstAfterAssign {
                at_ms: int(0)?,
                partition: int(1)? as i32,
                offset: int(2)?,
            }),
            "error" => self.error(rest.to_string()),
            _ => bail!("unknown member event line {line:?}"),
        }
        Ok(())
    }

    pub fn received_count(&self) -> u64 {
        self.received_count.load(Ordering::Relaxed)
    }
    /// The partitions of the latest assignment, unless revoked since (empty if none), and when
    /// that assignment or revocation happened.
    pub fn current_assignment(&self) -> (i64, Vec<i32>) {
        self.current.lock().expect("lock").clone()
    }
    pub fn errors_tail(&self, n: usize) -> Vec<String> {
        let errors = self.errors.lock().expect("lock");
        errors.iter().rev().take(n).rev().cloned().collect()
    }
    /// Highest acknowledged commit per partition among commits acknowledged before `before_ms`.
    pub fn acked_commits_before(&self, before_ms: i64) -> BTreeMap<i32, i64> {
        let mut best = BTreeMap::new();
        for c in self
            .commits
            .lock()
            .expect("lock")
            .iter()
            .filter(|c| c.at_ms < before_ms)
        {
            for (p, o) in &c.offsets {
                let e = best.entry(*p).or_insert(*o);
                *e = (*e).max(*o);
            }
        }
        best
    }
}

fn join<T: ToString>(items: impl Iterator<Item = T>) -> String {
    items.map(|i| i.to_string()).collect::<Vec<_>>().join(",")
}
