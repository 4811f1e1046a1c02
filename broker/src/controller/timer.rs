//! The active controller's timer-driven duty (Kafka's `QuorumController` periodic tasks): fence
//! brokers it has not heard from for `broker.session.timeout.ms` (a fenced broker asks to be
//! unfenced itself), fence a broker's previous incarnation once a newer one has waited a
//! session timeout to register, and every `leader.imbalance.check.interval.seconds` move
//! leadership back to preferred replicas (`auto.leader.rebalance.enable`). The quorum's own
//! traffic is the heartbeat: every broker is a quorum member the leader hears from several
//! times a second.
//!
//! This loop owns the clock and the proposing; what to change is decided by the pure
//! [`liveness_changes`] and [`preferred_leader_imbalance`], with elapsed time passed in.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};
use uuid::Uuid;

use super::brokers::{liveness_changes, MemberContact};
use super::partition_change::preferred_leader_imbalance;
use crate::metadata::image::MetadataImage;
use crate::metadata::records::MetadataCommand;

/// What the controller's timer needs from the node it runs on; `Broker` provides it. A trait
/// rather than the broker or the metadata store themselves, because both depend on the
/// controller's decisions: `controller/` depends only downward.
pub trait ControllerHost: Send + Sync + 'static {
    type Error: Display + Send;

    /// While this node is the active controller (the quorum leader): per quorum member, its
    /// broker id, how long ago this node last heard from it (`None`: not yet known; itself:
    /// `Some(0)`) and whether it votes. `None` while another node leads or none does.
    fn broker_contacts(&self) -> Option<Vec<MemberContact>>;

    /// The current metadata image.
    fn image(&self) -> Arc<MetadataImage>;

    /// This node's broker id and this process's incarnation. A registration pending for this
    /// very process proves its node's previous process gone (this one is the quorum member
    /// with that id, and leads the quorum), so the controller need not wait out its session.
    fn own_incarnation(&self) -> (i32, Uuid);

    /// Proposes a command and waits until it is decided and applied on this node.
    fn propose(&self, command: MetadataCommand) -> impl Future<Output = Result<(), Self::Error>> + Send;
}

/// The broker settings the timer runs by.
#[derive(Debug, Clone)]
pub struct TimerConfig {
    /// `broker.heartbeat.interval.ms`: the timer checks liveness twice per interval.
    pub broker_heartbeat_interval_ms: u64,
    /// `broker.session.timeout.ms`: silence after which a broker is fenced.
    pub broker_session_timeout_ms: u64,
    /// `auto.leader.rebalance.enable`
    pub auto_leader_rebalance_enable: bool,
    /// `leader.imbalance.check.interval.seconds`
    pub leader_imbalance_check_interval_seconds: u64,
}

/// Runs the timer until `shutdown` changes; it acts only while `host` leads the quorum.
pub async fn run<H: ControllerHost>(host: Arc<H>, config: TimerConfig, mut shutdown: watch::Receiver<bool>) {
    let period = Duration::from_millis(config.broker_heartbeat_interval_ms.clamp(100, 2000) / 2);
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut leading_since: Option<Instant> = None;
    let mut pending = PendingIncarnations::default();
    let rebalance_period = Duration::from_secs(config.leader_imbalance_check_interval_seconds.max(1));
    let mut last_rebalance = Instant::now();
    loop {
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = ticker.tick() => {}
        }
        let Some(contacts) = host.broker_contacts() else {
            leading_since = None;
            pending = PendingIncarnations::default();
            continue;
        };
        let since = *leading_since.get_or_insert_with(Instant::now);
        if config.auto_leader_rebalance_enable
            && last_rebalance.elapsed() >= rebalance_period
            && preferred_leader_imbalance(&host.image())
        {
            last_rebalance = Instant::now();
            tracing::info!("controller: moving leadership back to preferred replicas");
            if let Err(e) = host.propose(MetadataCommand::ElectPreferredLeaders).await {
                tracing::warn!(error = %e, "controller could not rebalance leaders; will retry");
            }
        }
        let image = host.image();
        let pending_for_ms = pending.observe(&image, host.own_incarnation(), config.broker_session_timeout_ms);
        let commands = liveness_changes(
            &image,
            &contacts,
            &pending_for_ms,
            since.elapsed().as_millis() as u64,
            config.broker_session_timeout_ms,
        );
        for command in commands {
            // Leadership may have moved while an earlier command was decided: a follower's
            // proposal is forwarded to the new leader, which would commit a stale decision.
            if host.broker_contacts().is_none() {
                break;
            }
            tracing::info!(?command, "controller: broker liveness changed");
            if let Err(e) = host.propose(command).await {
                tracing::warn!(error = %e, "controller could not record a liveness change; will retry");
            }
        }
    }
}

/// When this controller first saw each registered incarnation with a newer one pending, so
/// that the registered one's session can be taken to end a session timeout after that.
#[derive(Default)]
struct PendingIncarnations {
    /// By broker id: the registered incarnation and when a successor was first seen pending.
    since: BTreeMap<i32, (Uuid, Instant)>,
}

impl PendingIncarnations {
    /// Notes the image's pending incarnations and returns, per broker with one, how long ago
    /// it was first seen (a full session for this node's own previous process: see
    /// [`ControllerHost::own_incarnation`]). Entries no longer pending are forgotten, so the
    /// map holds at most one entry per registered broker.
    fn observe(&mut self, image: &MetadataImage, own: (i32, Uuid), session_timeout_ms: u64) -> BTreeMap<i32, u64> {
        let now = Instant::now();
        self.since.retain(|id, (registered, _)| {
            image
                .brokers
                .get(id)
                .is_some_and(|b| b.incarnation_id == *registered && b.pending_incarnation.is_some())
        });
        let mut pending_for_ms = BTreeMap::new();
        for b in image.brokers.values() {
            let Some(successor) = b.pending_incarnation else {
                continue;
            };
            let (_, first_seen) = self.since.entry(b.broker_id).or_insert((b.incarnation_id, now));
            let ms = if (b.broker_id, successor) == own {
                session_timeout_ms
            } else {
                now.duration_since(*first_seen).as_millis() as u64
            };
            pending_for_ms.insert(b.broker_id, ms);
        }
        pending_for_ms
    }
}

#[cfg(test)]
mod tests {
    use parking_lot::Mutex;

    use super::*;
    use crate::controller::decide;
    use crate::controller::test_support::*;
    use crate::metadata::records::MetadataRecord;

    /// A node whose quorum view is fixed and whose proposals are decided and applied at once.
    struct FakeHost {
        leading: bool,
        contacts: Vec<MemberContact>,
        image: Mutex<Arc<MetadataImage>>,
        proposed: Mutex<Vec<MetadataCommand>>,
    }

    impl ControllerHost for FakeHost {
        type Error = String;

        fn broker_contacts(&self) -> Option<Vec<MemberContact>> {
            self.leading.then(|| self.contacts.clone())
        }

        fn image(&self) -> Arc<MetadataImage> {
            self.image.lock().clone()
        }

        fn own_incarnation(&self) -> (i32, Uuid) {
            (1, Uuid::from_u128(1))
        }

        async fn propose(&self, command: MetadataCommand) -> Result<(), String> {
            let mut image = (*self.image()).clone();
            let (records, _) = decide(&image, &command).map_err(|e| e.message)?;
            apply_all(&mut image, &records);
            *self.image.lock() = Arc::new(image);
            self.proposed.lock().push(command);
            Ok(())
        }
    }

    /// Runs the timer on a host with brokers 1 and 2, broker 2 silent for longer than the
    /// session timeout, for `ms` milliseconds; returns what it proposed.
    async fn run_for(leading: bool, ms: u64) -> (Vec<MetadataCommand>, Arc<MetadataImage>) {
        run_on(leading, Some(10_000), image_with_brokers(&[1, 2]), ms).await
    }

    /// Runs the timer for `ms` milliseconds on node 1 (incarnation 1), the only voter, with
    /// broker 2 a learner last heard `broker_2_heard_ms` ago; returns what it proposed.
    async fn run_on(
        leading: bool,
        broker_2_heard_ms: Option<u64>,
        image: MetadataImage,
        ms: u64,
    ) -> (Vec<MetadataCommand>, Arc<MetadataImage>) {
        let host = Arc::new(FakeHost {
            leading,
            // Broker 2 is a learner: broker 1, the only voter, is a majority by itself.
            contacts: vec![
                MemberContact {
                    broker_id: 1,
                    last_heard_ms: Some(0),
                    voter: true,
                },
                MemberContact {
                    broker_id: 2,
                    last_heard_ms: broker_2_heard_ms,
                    voter: false,
                },
            ],
            image: Mutex::new(Arc::new(image)),
            proposed: Mutex::default(),
        });
        let config = TimerConfig {
            broker_heartbeat_interval_ms: 100,
            broker_session_timeout_ms: 9_000,
            auto_leader_rebalance_enable: true,
            leader_imbalance_check_interval_seconds: 1,
        };
        let (stop, shutdown) = watch::channel(false);
        let timer = tokio::spawn(run(host.clone(), config, shutdown));
        tokio::time::sleep(Duration::from_millis(ms)).await;
        stop.send_replace(true);
        timer.await.unwrap();
        let proposed = host.proposed.lock().clone();
        (proposed, host.image())
    }

    #[tokio::test]
    async fn the_active_controller_fences_a_silent_broker_once() {
        let (proposed, image) = run_for(true, 400).await;
        assert_eq!(proposed, vec![MetadataCommand::FenceBroker { broker_id: 2 }]);
        assert!(image.is_live(1) && !image.is_live(2));
    }

    #[tokio::test]
    async fn a_node_that_does_not_lead_the_quorum_proposes_nothing() {
        let (proposed, image) = run_for(false, 400).await;
        assert!(proposed.is_empty(), "{proposed:?}");
        assert!(image.is_live(2));
    }

    /// Brokers 1 and 2, each with a newer incarnation waiting for its session to end: node 1's
    /// is this controller's own process (incarnation 1), broker 2's another node's.
    fn image_with_pending_incarnations() -> MetadataImage {
        let mut image = image_with_brokers(&[1, 2]);
        for broker_id in [1, 2] {
            image.apply(&MetadataRecord::RegistrationPending {
                broker_id,
                incarnation_id: Uuid::from_u128(broker_id as u128),
            });
        }
        image
    }

    #[tokio::test]
    async fn a_previous_incarnation_is_fenced_a_session_after_its_successor_asked_even_while_its_node_is_heard() {
        // Broker 2 is heard from all along (its new process) and has waited less than the
        // session: not fenced. This node's own previous process is fenced at once.
        let (proposed, image) = run_on(true, Some(0), image_with_pending_incarnations(), 400).await;
        assert_eq!(proposed, vec![MetadataCommand::FenceBroker { broker_id: 1 }]);
        assert!(!image.is_live(1) && image.is_live(2));
        let mut observed = PendingIncarnations::default();
        let image = image_with_pending_incarnations();
        let first = observed.observe(&image, (1, Uuid::from_u128(1)), 9_000);
        assert_eq!(first, BTreeMap::from([(1, 9_000), (2, 0)]));
        tokio::time::sleep(Duration::from_millis(50)).await;
        let later = observed.observe(&image, (1, Uuid::from_u128(1)), 9_000);
        assert!(later[&2] >= 50, "timed from when it was first seen: {later:?}");
        // Once broker 2 registers anew, its entry is forgotten.
        let mut registered = image;
        registered.apply(&MetadataRecord::RegisterBroker {
            broker_id: 2,
            incarnation_id: Uuid::from_u128(2),
            endpoints: vec![],
            rack: None,
            replica_capacity: None,
        });
        let after = observed.observe(&registered, (1, Uuid::from_u128(1)), 9_000);
        assert_eq!(after.keys().collect::<Vec<_>>(), vec![&1]);
        assert_eq!(observed.since.len(), 1);
    }
}
