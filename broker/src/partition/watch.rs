//! The offsets a partition publishes to the requests waiting on it (`acks=all` produces,
//! long-polling fetches, DeleteRecords): five atomics (high watermark, log end offset, leader
//! epoch, low watermark, first unstable offset) and one `Notify`, instead of one `watch` channel
//! per value (each of which carries nine `Notify`s, ~350 B apiece). The last stable offset is
//! derived: the high watermark, or the first unstable offset if lower.
//!
//! Every change stores the new value and then wakes every registered waiter; a waiter checks
//! the value it cares about and goes back to waiting when that one did not move. No wake-up is
//! lost: a waiter creates its `Notified` *before* it reads the values, and `notify_waiters`
//! completes every `Notified` created before the call, polled yet or not.
//!
//! A [`WatchSet`] follows many partitions' watches at once (a follower's fetch session): each
//! change also marks the partition in every set subscribed to it and wakes that set's one
//! waiter, so a fetch session learns which of its thousands of partitions changed without
//! looking at the others.

use std::collections::HashSet;
use std::sync::atomic::{AtomicI32, AtomicI64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use tokio::sync::futures::Notified;
use tokio::sync::Notify;
use tokio::time::Instant;
use uuid::Uuid;

/// A partition as a [`WatchSet`] names it: topic id and index.
pub type WatchKey = (Uuid, i32);

/// The partitions of one waiter (a follower's fetch session) that changed since it last
/// looked, and the wake-up for that waiter. Holds at most one entry per subscribed partition.
#[derive(Debug, Default)]
pub struct WatchSet {
    changed: Mutex<HashSet<WatchKey>>,
    /// `notify_one`: a change while nobody waits leaves a permit, so it is never lost.
    wake: Notify,
    /// When the session's follower last fetched (ms since the epoch), shared with each
    /// partition's record of that follower: an idle partition it holds at the log end counts
    /// as caught up at that time without being named in the fetch.
    fetched_ms: Arc<AtomicI64>,
}

impl WatchSet {
    pub fn new() -> Arc<WatchSet> {
        Arc::new(WatchSet::default())
    }

    fn mark(&self, key: WatchKey) {
        if self.changed.lock().insert(key) {
            self.wake.notify_one();
        }
    }

    /// Takes the partitions that changed since the last call.
    pub fn take_changed(&self) -> Vec<WatchKey> {
        self.changed.lock().drain().collect()
    }

    /// Completes at the next change (or at once if one came since the last wait ended).
    pub async fn changed(&self) {
        self.wake.notified().await
    }

    /// The follower fetched at `now_ms`.
    pub fn fetched(&self, now_ms: i64) {
        self.fetched_ms.fetch_max(now_ms, Ordering::AcqRel);
    }

    /// The clock partitions keep for the follower (see `fetched_ms`).
    pub fn fetch_clock(&self) -> &Arc<AtomicI64> {
        &self.fetched_ms
    }
}

#[derive(Debug)]
struct Subscriber {
    set: Weak<WatchSet>,
    key: WatchKey,
}

/// The published values at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watched {
    pub high_watermark: i64,
    pub log_end_offset: i64,
    pub leader_epoch: i32,
    pub low_watermark: i64,
}

#[derive(Debug)]
pub struct PartitionWatch {
    high_watermark: AtomicI64,
    log_end_offset: AtomicI64,
    leader_epoch: AtomicI32,
    /// Leader only: the lowest log start offset over the ISR (DeleteRecords waits on it).
    low_watermark: AtomicI64,
    /// The first offset of the oldest open transaction, `i64::MAX` when none is open: with the
    /// high watermark it makes the last stable offset that `read_committed` fetches wait on.
    first_unstable_offset: AtomicI64,
    changed: Notify,
    /// The [`WatchSet`]s following this partition (no allocation while there are none).
    subscribers: Mutex<Vec<Subscriber>>,
}

impl PartitionWatch {
    pub fn new(initial: Watched) -> PartitionWatch {
        PartitionWatch {
            high_watermark: AtomicI64::new(initial.high_watermark),
            log_end_offset: AtomicI64::new(initial.log_end_offset),
            leader_epoch: AtomicI32::new(initial.leader_epoch),
            low_watermark: AtomicI64::new(initial.low_watermark),
            first_unstable_offset: AtomicI64::new(i64::MAX),
            changed: Notify::new(),
            subscribers: Mutex::new(Vec::new()),
        }
    }

    pub fn high_watermark(&self) -> i64 {
        self.high_watermark.load(Ordering::Acquire)
    }

    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset.load(Ordering::Acquire)
    }

    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch.load(Ordering::Acquire)
    }

    pub fn low_watermark(&self) -> i64 {
        self.low_watermark.load(Ordering::Acquire)
    }

    /// Kafka's last stable offset: the high watermark, or the first offset of the oldest open
    /// transaction if that is lower. `read_committed` consumers read below it.
    pub fn last_stable_offset(&self) -> i64 {
        self.high_watermark()
            .min(self.first_unstable_offset.load(Ordering::Acquire))
    }

    /// Publishes the first unstable offset (None: no open transaction); wakes waiters when it
    /// moved, so a `read_committed` long poll sees a marker lift the last stable offset.
    pub fn set_first_unstable_offset(&self, offset: Option<i64>) -> bool {
        let offset = offset.unwrap_or(i64::MAX);
        let previous = self.first_unstable_offset.swap(offset, Ordering::AcqRel);
        self.notify_if(previous != offset)
    }

    pub fn get(&self) -> Watched {
        Watched {
            high_watermark: self.high_watermark(),
            log_end_offset: self.log_end_offset(),
            leader_epoch: self.leader_epoch(),
            low_watermark: self.low_watermark(),
        }
    }

    /// A future that completes at the next change after this call. Create it before reading
    /// the values it is to guard (see the module comment).
    pub fn changed(&self) -> Notified<'_> {
        self.changed.notified()
    }

    /// Moves the high watermark forward to `candidate` (never back); true when it moved.
    pub fn advance_high_watermark(&self, candidate: i64) -> bool {
        let previous = self.high_watermark.fetch_max(candidate, Ordering::AcqRel);
        self.notify_if(previous < candidate)
    }

    /// Keeps the high watermark within `[low, high]` (a truncated log); true when it moved.
    pub fn clamp_high_watermark(&self, low: i64, high: i64) -> bool {
        let moved = self
            .high_watermark
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |hw| {
                let clamped = hw.clamp(low, high.max(low));
                (clamped != hw).then_some(clamped)
            })
            .is_ok();
        self.notify_if(moved)
    }

    pub fn set_log_end_offset(&self, offset: i64) -> bool {
        let previous = self.log_end_offset.swap(offset, Ordering::AcqRel);
        self.notify_if(previous != offset)
    }

    pub fn set_leader_epoch(&self, epoch: i32) -> bool {
        let previous = self.leader_epoch.swap(epoch, Ordering::AcqRel);
        self.notify_if(previous != epoch)
    }

    pub fn set_low_watermark(&self, offset: i64) -> bool {
        let previous = self.low_watermark.swap(offset, Ordering::AcqRel);
        self.notify_if(previous != offset)
    }

    fn notify_if(&self, changed: bool) -> bool {
        if changed {
            self.changed.notify_waiters();
            self.mark_subscribers();
        }
        changed
    }

    /// Tells waiters and subscribed sets that something they read besides these values changed
    /// (the log start offset).
    pub fn touch(&self) {
        self.notify_if(true);
    }

    fn mark_subscribers(&self) {
        let mut subscribers = self.subscribers.lock();
        subscribers.retain(|s| match s.set.upgrade() {
            Some(set) => {
                set.mark(s.key);
                true
            }
            None => false,
        });
    }

    /// Marks this partition in `set` at every change from now on, as `key`.
    pub fn subscribe(&self, set: &Arc<WatchSet>, key: WatchKey) {
        let mut subscribers = self.subscribers.lock();
        subscribers.retain(|s| s.set.strong_count() > 0);
        let weak = Arc::downgrade(set);
        if !subscribers.iter().any(|s| s.set.ptr_eq(&weak) && s.key == key) {
            // A partition has a subscriber or two (its followers' sessions): grown one at a
            // time rather than doubled, as every hosted replica keeps this vector.
            subscribers.reserve_exact(1);
            subscribers.push(Subscriber { set: weak, key });
        }
    }

    pub fn unsubscribe(&self, set: &Arc<WatchSet>) {
        let weak = Arc::downgrade(set);
        self.subscribers
            .lock()
            .retain(|s| !s.set.ptr_eq(&weak) && s.set.strong_count() > 0);
    }

    /// The partition is no longer hosted here: every set following it is told once (and then
    /// finds it gone), and none follows it any more.
    pub fn close_subscriptions(&self) {
        let subscribers = std::mem::take(&mut *self.subscribers.lock());
        for s in subscribers {
            if let Some(set) = s.set.upgrade() {
                set.mark(s.key);
            }
        }
    }

    /// Waits until `check` answers for the published values, or the deadline (`None`).
    /// `check` runs once at the start and again after every change, whichever value moved.
    pub async fn wait_for<T>(&self, deadline: Instant, mut check: impl FnMut(Watched) -> Option<T>) -> Option<T> {
        loop {
            let changed = self.changed();
            tokio::pin!(changed);
            // Registered before the check: a change from here on completes `changed`.
            changed.as_mut().enable();
            if let Some(done) = check(self.get()) {
                return Some(done);
            }
            tokio::select! {
                _ = changed => {}
                _ = tokio::time::sleep_until(deadline) => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    fn watch() -> Arc<PartitionWatch> {
        Arc::new(PartitionWatch::new(Watched {
            high_watermark: 0,
            log_end_offset: 0,
            leader_epoch: 1,
            low_watermark: 0,
        }))
    }

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(3600)
    }

    #[tokio::test]
    async fn a_change_between_the_check_and_the_wait_is_not_lost() {
        let w = watch();
        let mut checks = 0;
        let writer = w.clone();
        // The first check sees nothing and makes the change itself, after `changed` was
        // registered and before the waiter sleeps: the wait must still end.
        let found = w
            .wait_for(far(), |v| {
                checks += 1;
                if checks == 1 {
                    assert!(writer.advance_high_watermark(5));
                }
                (v.high_watermark >= 5).then_some(v.high_watermark)
            })
            .await;
        assert_eq!((found, checks), (Some(5), 2));
    }

    #[tokio::test]
    async fn a_notified_created_before_a_change_completes_without_having_been_polled() {
        let w = watch();
        let changed = w.changed();
        assert!(w.set_log_end_offset(3));
        tokio::time::timeout(Duration::from_secs(10), changed)
            .await
            .expect("the change before the first poll woke the future");
    }

    #[tokio::test]
    async fn waiters_wake_on_other_values_too_and_go_back_to_waiting() {
        let w = watch();
        let waiter = {
            let w = w.clone();
            tokio::spawn(async move {
                let mut checks = 0;
                let hw = w
                    .wait_for(far(), |v| {
                        checks += 1;
                        (v.high_watermark >= 2).then_some(v.high_watermark)
                    })
                    .await;
                (hw, checks)
            })
        };
        // Each change is made once the waiter has gone back to waiting, so it sees each.
        tokio::task::yield_now().await;
        for step in [
            |w: &PartitionWatch| w.set_log_end_offset(2),
            |w: &PartitionWatch| w.set_low_watermark(1),
            |w: &PartitionWatch| w.advance_high_watermark(2),
        ] {
            assert!(step(&w));
            tokio::task::yield_now().await;
        }
        let (hw, checks) = waiter.await.unwrap();
        assert_eq!(hw, Some(2));
        assert!(checks >= 2, "checked at the start and after the high watermark moved");
    }

    #[tokio::test]
    async fn a_wait_ends_at_its_deadline_without_a_change() {
        let w = watch();
        let found = w
            .wait_for(Instant::now() + Duration::from_millis(1), |v| {
                (v.high_watermark > 0).then_some(())
            })
            .await;
        assert_eq!(found, None);
    }

    #[tokio::test]
    async fn a_watch_set_hears_of_each_subscribed_partition_once_until_it_looks() {
        let (a, b) = (watch(), watch());
        let set = WatchSet::new();
        let (key_a, key_b) = ((Uuid::from_u128(1), 0), (Uuid::from_u128(1), 1));
        a.subscribe(&set, key_a);
        a.subscribe(&set, key_a);
        b.subscribe(&set, key_b);
        assert!(set.take_changed().is_empty());
        assert!(a.set_log_end_offset(1));
        assert!(a.advance_high_watermark(1));
        tokio::time::timeout(Duration::from_secs(10), set.changed())
            .await
            .expect("a change while nobody waited leaves a wake-up");
        assert_eq!(set.take_changed(), vec![key_a], "once, though two values moved");
        a.unsubscribe(&set);
        assert!(a.set_log_end_offset(2));
        assert!(set.take_changed().is_empty(), "no longer followed");
        b.close_subscriptions();
        assert_eq!(set.take_changed(), vec![key_b], "a removed partition is told once");
        assert!(b.set_log_end_offset(1));
        assert!(set.take_changed().is_empty());
        // A set that is gone is dropped from the partition's subscribers at its next change.
        a.subscribe(&set, key_a);
        drop(set);
        assert!(a.set_log_end_offset(3));
        assert!(a.subscribers.lock().is_empty());
    }

    #[test]
    fn unchanged_values_do_not_count_as_changes() {
        let w = watch();
        assert!(!w.set_log_end_offset(0));
        assert!(!w.set_leader_epoch(1));
        assert!(!w.advance_high_watermark(-1), "the high watermark only moves forward");
        assert!(w.advance_high_watermark(10));
        assert!(w.clamp_high_watermark(0, 4), "a truncation lowers it");
        assert_eq!(w.high_watermark(), 4);
        assert!(!w.clamp_high_watermark(0, 4));
    }
}
