//! Share sessions (KIP-932): a member's ShareFetch requests name only the partitions that
//! changed since the last one, so the leader keeps, per (group, member), the partitions the
//! member fetches and the epoch its next request must carry: 0 opens a session, -1 closes it,
//! otherwise each request carries the epoch after the last (Kafka's `ShareSessionCache`).
//! At most `group.share.max.share.sessions` are kept.

use std::collections::HashMap;

use indexmap::IndexSet;
use kafka_protocol::error::ResponseError;
use parking_lot::Mutex;
use uuid::Uuid;

/// The share session epoch that opens a session.
pub const INITIAL_EPOCH: i32 = 0;
/// The share session epoch that closes it.
pub const FINAL_EPOCH: i32 = -1;

#[derive(Debug)]
struct ShareSession {
    /// The epoch the member's next request carries.
    next_epoch: i32,
    partitions: IndexSet<(Uuid, i32)>,
    /// The connection its last request came on (`Session::connection_id`).
    connection_id: u64,
}

/// What a request does to its session.
#[derive(Debug, PartialEq, Eq)]
pub enum SessionStep {
    /// The session's partitions after the request's additions and removals.
    Open(Vec<(Uuid, i32)>),
    /// Epoch -1: the session is gone; these were its partitions.
    Closed(Vec<(Uuid, i32)>),
}

pub struct ShareSessions {
    max_sessions: usize,
    sessions: Mutex<HashMap<(String, String), ShareSession>>,
}

impl ShareSessions {
    pub fn new(max_sessions: usize) -> ShareSessions {
        ShareSessions {
            max_sessions,
            sessions: Mutex::new(HashMap::new()),
        }
    }

    /// Applies one request (`fetching`: ShareFetch, which may open a session and change its
    /// partitions; ShareAcknowledge may not) to the member's session.
    #[allow(clippy::too_many_arguments)]
    pub fn step(
        &self,
        group_id: &str,
        member_id: &str,
        epoch: i32,
        added: &[(Uuid, i32)],
        forgotten: &[(Uuid, i32)],
        fetching: bool,
        connection_id: u64,
    ) -> Result<SessionStep, (ResponseError, String)> {
        let key = (group_id.to_string(), member_id.to_string());
        let mut sessions = self.sessions.lock();
        match epoch {
            INITIAL_EPOCH if fetching => {
                if !sessions.contains_key(&key) && sessions.len() >= self.max_sessions {
                    return Err((
                        ResponseError::ShareSessionLimitReached,
                        format!(
                            "This broker keeps {} share sessions (group.share.max.share.sessions), all in use.",
                            self.max_sessions
                        ),
                    ));
                }
                let partitions: IndexSet<(Uuid, i32)> = added.iter().copied().collect();
                let open = partitions.iter().copied().collect();
                sessions.insert(
                    key,
                    ShareSession {
                        next_epoch: 1,
                        partitions,
                        connection_id,
                    },
                );
                Ok(SessionStep::Open(open))
            }
            FINAL_EPOCH => match sessions.remove(&key) {
                Some(session) => Ok(SessionStep::Closed(session.partitions.into_iter().collect())),
                None => Err(not_found(member_id)),
            },
            _ if epoch <= 0 => Err((
                ResponseError::InvalidShareSessionEpoch,
                format!("Share session epoch {epoch} is not valid here."),
            )),
            _ => {
                let Some(session) = sessions.get_mut(&key) else {
                    return Err(not_found(member_id));
                };
                if epoch != session.next_epoch {
                    return Err((
                        ResponseError::InvalidShareSessionEpoch,
                        format!(
                            "Share session epoch {epoch} is not the expected {}.",
                            session.next_epoch
                        ),
                    ));
                }
                session.next_epoch = if epoch == i32::MAX { 1 } else { epoch + 1 };
                session.connection_id = connection_id;
                if fetching {
                    for tp in forgotten {
                        session.partitions.shift_remove(tp);
                    }
                    session.partitions.extend(added.iter().copied());
                }
                Ok(SessionStep::Open(session.partitions.iter().copied().collect()))
            }
        }
    }

    /// Drops the sessions whose last request came on connection `connection_id`, which closed;
    /// returns their (group, member), whose records the caller releases (as Kafka does when a
    /// share consumer's connection goes).
    pub fn connection_closed(&self, connection_id: u64) -> Vec<(String, String)> {
        let mut sessions = self.sessions.lock();
        let gone: Vec<(String, String)> = sessions
            .iter()
            .filter(|(_, s)| s.connection_id == connection_id)
            .map(|(key, _)| key.clone())
            .collect();
        for key in &gone {
            sessions.remove(key);
        }
        gone
    }

    /// Whether some member of `group_id` has a share session here.
    pub fn has_group(&self, group_id: &str) -> bool {
        self.sessions.lock().keys().any(|(g, _)| g == group_id)
    }

    pub fn len(&self) -> usize {
        self.sessions.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn not_found(member_id: &str) -> (ResponseError, String) {
    (
        ResponseError::ShareSessionNotFound,
        format!("No share session for member {member_id} on this broker; it opens a new one."),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Uuid = Uuid::from_bytes([7; 16]);

    #[test]
    fn a_session_opens_at_zero_follows_its_epochs_and_closes_at_minus_one() {
        let sessions = ShareSessions::new(2);
        let step = |epoch, added: &[(Uuid, i32)], forgotten: &[(Uuid, i32)]| {
            sessions
                .step("g", "m", epoch, added, forgotten, true, 1)
                .map_err(|(e, _)| e)
        };
        assert_eq!(step(1, &[], &[]), Err(ResponseError::ShareSessionNotFound));
        assert_eq!(step(0, &[(T, 0)], &[]), Ok(SessionStep::Open(vec![(T, 0)])));
        assert_eq!(step(2, &[], &[]), Err(ResponseError::InvalidShareSessionEpoch));
        assert_eq!(step(1, &[(T, 1)], &[]), Ok(SessionStep::Open(vec![(T, 0), (T, 1)])));
        assert_eq!(step(2, &[], &[(T, 0)]), Ok(SessionStep::Open(vec![(T, 1)])));
        assert_eq!(
            sessions.step("g", "m", 3, &[(T, 2)], &[], false, 1).map_err(|(e, _)| e),
            Ok(SessionStep::Open(vec![(T, 1)])),
            "ShareAcknowledge moves the epoch but not the partitions"
        );
        assert_eq!(
            sessions.step("g", "m", 0, &[], &[], false, 1).map_err(|(e, _)| e),
            Err(ResponseError::InvalidShareSessionEpoch),
            "ShareAcknowledge cannot open a session"
        );
        assert_eq!(step(-1, &[], &[]), Ok(SessionStep::Closed(vec![(T, 1)])));
        assert_eq!(step(-1, &[], &[]), Err(ResponseError::ShareSessionNotFound));
        assert_eq!(step(-2, &[], &[]), Err(ResponseError::InvalidShareSessionEpoch));
    }

    #[test]
    fn sessions_beyond_the_limit_are_refused_but_a_member_may_reopen_its_own() {
        let sessions = ShareSessions::new(1);
        assert!(sessions.step("g", "a", 0, &[], &[], true, 1).is_ok());
        assert!(
            sessions.step("g", "a", 0, &[], &[], true, 1).is_ok(),
            "a reopening replaces its session"
        );
        assert_eq!(
            sessions.step("g", "b", 0, &[], &[], true, 2).map_err(|(e, _)| e),
            Err(ResponseError::ShareSessionLimitReached)
        );
        assert!(sessions.step("g", "a", -1, &[], &[], true, 1).is_ok());
        assert!(sessions.step("g", "b", 0, &[], &[], true, 2).is_ok());
        assert_eq!(sessions.len(), 1);
    }

    #[test]
    fn a_closed_connection_takes_the_sessions_that_last_used_it() {
        let sessions = ShareSessions::new(10);
        assert!(sessions.step("g", "a", 0, &[(T, 0)], &[], true, 7).is_ok());
        assert!(sessions.step("g", "b", 0, &[(T, 0)], &[], true, 8).is_ok());
        // a's next request comes on another connection: the session follows it.
        assert!(sessions.step("g", "a", 1, &[], &[], true, 9).is_ok());
        assert_eq!(sessions.connection_closed(7), Vec::<(String, String)>::new());
        assert_eq!(sessions.connection_closed(9), vec![("g".to_string(), "a".to_string())]);
        assert_eq!(
            sessions.step("g", "a", 2, &[], &[], true, 9).map_err(|(e, _)| e),
            Err(ResponseError::ShareSessionNotFound)
        );
        assert_eq!(sessions.len(), 1);
    }
}
