//! KIP-932 share-partition states at the coordinator: a leader's writes kept and read back,
//! fenced by an older state epoch (a reset) or an older leader epoch, a reset at the next
//! state epoch, tombstones when the group is deleted or its offsets are (an empty group only),
//! and a reload that restores the states and the (empty) share group, keeping a reset over a
//! stale write that came after it.

use uuid::Uuid;

use super::*;
use crate::share::state::{ShareState, StateBatch, DELIVERY_ACKNOWLEDGED};

const T: Uuid = Uuid::from_bytes([3; 16]);

fn state(state_epoch: i32, leader_epoch: i32, start_offset: i64) -> ShareState {
    ShareState {
        state_epoch,
        leader_epoch,
        start_offset,
        batches: vec![StateBatch {
            first_offset: start_offset + 5,
            last_offset: start_offset + 9,
            delivery_state: DELIVERY_ACKNOWLEDGED,
            delivery_count: 1,
        }],
    }
}

fn write(c: &mut GroupCoordinator, s: ShareState) -> Result<(), ResponseError> {
    c.check_share_write("sg", T, 0, &s).map_err(|e| e.0)?;
    c.share_state_written("sg", T, 0, s);
    Ok(())
}

#[test]
fn a_leaders_writes_are_read_back_and_older_epochs_are_fenced() {
    let mut f = Fixture::new(GroupConfig::default());
    let c = &mut f.coordinator;
    assert_eq!(c.read_share_state("sg", T, 0), Ok(None));
    write(c, state(0, 4, 10)).unwrap();
    write(c, state(0, 4, 20)).unwrap();
    assert_eq!(c.read_share_state("sg", T, 0), Ok(Some(state(0, 4, 20))));

    // A new leader (epoch 5) writes; the old one (4) is fenced from then on.
    write(c, state(0, 5, 30)).unwrap();
    assert_eq!(write(c, state(0, 4, 40)), Err(ResponseError::FencedLeaderEpoch));

    // A reset moves to the next state epoch; a write at the old one is fenced.
    let (_, reset) = c.reset_share_state("sg", T, 0, 7).unwrap();
    assert_eq!((reset.state_epoch, reset.start_offset, reset.batches.len()), (1, 7, 0));
    c.share_state_written("sg", T, 0, reset.clone());
    assert_eq!(write(c, state(0, 5, 50)), Err(ResponseError::FencedStateEpoch));
    // A stale write that was checked before the reset and stored after it does not undo it.
    c.share_state_written("sg", T, 0, state(0, 5, 60));
    assert_eq!(c.read_share_state("sg", T, 0), Ok(Some(reset)));
    write(c, state(1, 6, 8)).unwrap();
    assert_eq!(c.read_share_state("sg", T, 0).unwrap().map(|s| s.start_offset), Some(8));
}

#[test]
fn a_state_that_overlaps_or_is_too_large_is_refused() {
    let mut f = Fixture::new(GroupConfig::default());
    let c = &mut f.coordinator;
    let mut overlapping = state(0, 1, 10);
    overlapping.batches.push(overlapping.batches[0]);
    assert_eq!(write(c, overlapping), Err(ResponseError::InvalidRequest));
    let mut below_start = state(0, 1, 10);
    below_start.batches[0].first_offset = 3;
    assert_eq!(write(c, below_start), Err(ResponseError::InvalidRequest));
    let mut too_many = state(0, 1, 0);
    too_many.batches = (0..c.max_share_state_batches() as i64 + 1)
        .map(|i| StateBatch {
            first_offset: i,
            last_offset: i,
            delivery_state: DELIVERY_ACKNOWLEDGED,
            delivery_count: 1,
        })
        .collect();
    assert_eq!(write(c, too_many), Err(ResponseError::InvalidRequest));
    assert_eq!(c.read_share_state("sg", T, 0), Ok(None));
}

#[test]
fn a_classic_groups_id_takes_no_share_state_and_an_unowned_group_is_not_coordinated_here() {
    let mut f = Fixture::new(GroupConfig {
        num_partitions: 1,
        ..GroupConfig::default()
    });
    let (_, _) = f.join_new("classic", "m1");
    assert_eq!(
        f.coordinator
            .check_share_write("classic", T, 0, &state(0, 1, 0))
            .map_err(|e| e.0),
        Err(ResponseError::InvalidRequest)
    );
    let mut other = GroupCoordinator::new(GroupConfig::default());
    assert_eq!(other.read_share_state("sg", T, 0), Err(ResponseError::NotCoordinator));
    assert!(other.check_share_write("sg", T, 0, &state(0, 1, 0)).is_err());
    other.share_state_written("sg", T, 0, state(0, 1, 0));
    assert!(other.share_states_of("sg").is_empty());
}

#[test]
fn deleting_the_share_group_tombstones_its_states_and_a_reload_restores_them_with_the_group() {
    let mut f = Fixture::new(GroupConfig::default());
    let c = &mut f.coordinator;
    write(c, state(0, 1, 10)).unwrap();
    c.share_state_written("sg", T, 1, state(0, 1, 20));

    // A reload replays the records in log order: a stale write after a reset keeps the reset.
    let record = |partition: i32, s: Option<ShareState>| LoadedRecord::Record {
        offset: 0,
        producer_id: None,
        record: GroupRecord::ShareState {
            group_id: "sg".into(),
            topic_id: T,
            partition,
            value: s,
        },
    };
    let mut reloaded = GroupCoordinator::new(GroupConfig {
        num_partitions: 1,
        ..GroupConfig::default()
    });
    reloaded.begin_load(0, 2);
    assert!(reloaded.complete_load(
        0,
        2,
        vec![
            record(0, Some(state(0, 1, 10))),
            record(0, Some(state(1, -1, 3))),
            record(0, Some(state(0, 1, 99))),
            record(1, Some(state(0, 1, 20))),
        ],
        0,
    ));
    assert_eq!(
        reloaded.read_share_state("sg", T, 0).unwrap().map(|s| s.start_offset),
        Some(3)
    );
    assert_eq!(reloaded.share_states_of("sg").len(), 2);
    let (listed, _) = reloaded.list_groups();
    assert_eq!(
        listed
            .iter()
            .map(|g| (g.group_id.as_str(), g.group_type, g.state))
            .collect::<Vec<_>>(),
        vec![("sg", "share", "Empty")],
        "the share group is back, empty, before its members return"
    );

    let fx = reloaded.delete_group("sg").unwrap();
    let Some(Effect::Records { records, .. }) = fx.first() else {
        panic!("deleting the group stores nothing: {fx:?}");
    };
    assert_eq!(records.len(), 2);
    assert!(records
        .iter()
        .all(|r| matches!(r, GroupRecord::ShareState { value: None, .. })));
    assert!(reloaded.share_states_of("sg").is_empty());
    assert_eq!(reloaded.read_share_state("sg", T, 0), Ok(None));
}

#[test]
fn deleting_offsets_drops_only_the_named_topics_states_of_an_empty_share_group() {
    let mut f = Fixture::new(GroupConfig::default());
    let other = Uuid::from_bytes([4; 16]);
    f.share_ok(super::share::hb("m", 0));
    write(&mut f.coordinator, state(0, 1, 10)).unwrap();
    f.coordinator.share_state_written("sg", other, 0, state(0, 1, 20));
    let refused = f
        .coordinator
        .delete_share_offsets("sg", &[T])
        .map(|_| ())
        .map_err(|e| e.0);
    assert_eq!(refused, Err(ResponseError::NonEmptyGroup), "the group has a member");
    assert_eq!(f.coordinator.share_states_of("sg").len(), 2);

    f.share_ok(super::share::hb("m", SHARE_LEAVE_EPOCH));
    let fx = f.coordinator.delete_share_offsets("sg", &[T]).unwrap();
    assert!(
        matches!(fx.as_slice(), [Effect::Records { records, .. }]
            if matches!(records.as_slice(), [GroupRecord::ShareState { topic_id, value: None, .. }] if *topic_id == T)),
        "{fx:?}"
    );
    assert_eq!(f.coordinator.read_share_state("sg", T, 0), Ok(None));
    assert_eq!(
        f.coordinator
            .read_share_state("sg", other, 0)
            .unwrap()
            .map(|s| s.start_offset),
        Some(20)
    );
    let unknown = f
        .coordinator
        .delete_share_offsets("nobody", &[T])
        .map(|_| ())
        .map_err(|e| e.0);
    assert_eq!(unknown, Err(ResponseError::GroupIdNotFound));
}
