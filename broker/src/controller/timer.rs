//! The active controller's timer-driven duty (Kafka's `QuorumController` periodic tasks): fence
//! brokers it has not heard from for `broker.session.timeout.ms` and unfence them when they are
//! back, and every `leader.imbalance.check.interval.seconds` move leadership back to preferred
//! replicas (`auto.leader.rebalance.enable`). The quorum's own traffic is the heartbeat: every
//! broker is a quorum member the leader hears from several times a second.
//!
//! This loop owns the clock and the proposing; what to change is decided by the pure
//! [`liveness_changes`] and [`preferred_leader_imbalance`], with elapsed time passed in.

use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};

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
    let rebalance_period = Duration::from_secs(config.leader_imbalance_check_interval_seconds.max(1));
    let mut last_rebalance = Instant::now();
    loop {
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = ticker.tick() => {}
        }
        let Some(contacts) = host.broker_contacts() else {
            leading_since = None;
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
        let commands = liveness_changes(
            &host.image(),
            &contacts,
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

#[cfg(test)]
mod tests {
    use parking_lot::Mutex;

    use super::*;
    use crate::controller::decide;
    use crate::controller::test_support::*;

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
                    last_heard_ms: Some(10_000),
                    voter: false,
                },
            ],
            image: Mutex::new(Arc::new(image_with_brokers(&[1, 2]))),
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
}
