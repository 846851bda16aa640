//! What the stores whose processes share one queue (SQLite, PostgreSQL,
//! Redis, MySQL) do alike: the range of their poll, how long a queued
//! head's place in the shared queue outlives its last look and when a look
//! refreshes it, the checks of their common options,
//! and lease rows read back as [`Holder`]s.

use std::time::{Duration, SystemTime};

use crate::clock::MAX_UNIX_MS;
use crate::{
    error::Error, error::Result, id::LeaseId, id::PoolId, id::SessionId, lease::Holder,
    lease::Lease, lease::Positions,
};

/// The shortest poll interval a shared store accepts: a shorter one would
/// have idle waiters spin a core re-reading the store.
pub const MIN_POLL_INTERVAL: Duration = Duration::from_millis(10);

/// The longest poll interval a shared store accepts. Each poll of a
/// waiting head is also the heartbeat of its place in the shared queue,
/// which the other processes drop [`WAITER_TTL`] after its last one.
pub const MAX_POLL_INTERVAL: Duration = Duration::from_millis(1500);

/// How long a queued head's place in a shared queue outlives its last look
/// (4.5 s): three of the longest poll intervals, so that a head that polls
/// as slowly as allowed never loses its place, and a head that stopped
/// looking (its process stopped or cut off) holds back no one for longer.
/// A store that can tell a dead process's place at once (SQLite's kernel
/// locks, MySQL's named locks, PostgreSQL's backend ids) drops it sooner.
pub const WAITER_TTL: Duration = Duration::from_millis(3 * 1500);

/// [`WAITER_TTL`] in whole milliseconds, for SQL and scripts.
pub const WAITER_TTL_MS: i64 = 3 * 1500;

const _: () = assert!(WAITER_TTL.as_millis() == 3 * MAX_POLL_INTERVAL.as_millis());
const _: () = assert!(WAITER_TTL_MS as u128 == WAITER_TTL.as_millis());

/// `d` in whole milliseconds, capped at [`MAX_UNIX_MS`]: how stores pass
/// durations to SQL and scripts. Beyond the cap every expiry saturates
/// anyway, and capped, a server's `now + d` cannot overflow a 64-bit
/// integer.
pub fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis().min(u128::from(MAX_UNIX_MS))).unwrap_or(i64::MAX)
}

/// Checks a store option's poll interval against [`MIN_POLL_INTERVAL`] and
/// [`MAX_POLL_INTERVAL`].
///
/// # Errors
/// [`Error::InvalidArgument`] naming `poll_interval` outside that range.
pub fn check_poll_interval(interval: Duration) -> Result<()> {
    if (MIN_POLL_INTERVAL..=MAX_POLL_INTERVAL).contains(&interval) {
        return Ok(());
    }
    Err(Error::InvalidArgument {
        field: "poll_interval",
        allowed: format!("{MIN_POLL_INTERVAL:?}..={MAX_POLL_INTERVAL:?}"),
        got: format!("{interval:?}"),
    })
}

/// Checks a store option's connection pool size: at least 1.
///
/// # Errors
/// [`Error::InvalidArgument`] naming `pool_size` if it is 0.
pub fn check_pool_size(size: usize) -> Result<()> {
    if size > 0 {
        return Ok(());
    }
    Err(Error::InvalidArgument {
        field: "pool_size",
        allowed: "1 or more".into(),
        got: "0".into(),
    })
}

/// Checks a name a store puts in front of its tables or keys (`field`, for
/// the error): 1 to `max` characters of `a-z`, `A-Z`, `0-9`, `_` and those
/// in `also`.
///
/// # Errors
/// [`Error::InvalidArgument`] naming `field`, with the first 80 characters
/// of what was given.
pub fn check_prefix(field: &'static str, prefix: &str, max: usize, also: &str) -> Result<()> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || c == '_' || also.contains(c);
    if !prefix.is_empty() && prefix.len() <= max && prefix.chars().all(allowed) {
        return Ok(());
    }
    let mut chars = String::from("a-z, A-Z, 0-9, _");
    for c in also.chars() {
        chars.push_str(", ");
        chars.push(c);
    }
    Err(Error::InvalidArgument {
        field,
        allowed: format!("1 to {max} of {chars}"),
        got: format!("{:?}", prefix.chars().take(80).collect::<String>()),
    })
}

/// What a refused head's attempt does with its place in the shared queue:
/// see [`place_step`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlaceStep {
    /// It has no live place: it joins the queue's tail, alive until this
    /// time (unix ms on the deciding clock).
    Join {
        /// Unix ms on the deciding clock.
        alive_until: i64,
    },
    /// Its place is refreshed to live until this time (unix ms).
    Refresh {
        /// Unix ms on the deciding clock.
        alive_until: i64,
    },
    /// Its place has more than half its life left: nothing is written.
    Keep,
}

/// Where a refused head's place goes, at `now` (unix ms on the deciding
/// clock), given the end of its live place if it has one (`alive_until`)
/// and, for a held place ([`BorrowRequest::hold`](super::BorrowRequest::hold)),
/// how long it is held: a new place joins the tail; a place lives
/// [`WAITER_TTL`] after a look, or `hold` after every look for a held
/// place; a plain place is rewritten only once less than half of that is
/// left, so that a head polling fast writes rarely.
pub fn place_step(now: i64, alive_until: Option<i64>, hold: Option<Duration>) -> PlaceStep {
    let renewed = now.saturating_add(hold.map_or(WAITER_TTL_MS, millis));
    match alive_until {
        None => PlaceStep::Join {
            alive_until: renewed,
        },
        Some(alive) if hold.is_some() || alive.saturating_sub(now) < WAITER_TTL_MS / 2 => {
            PlaceStep::Refresh {
                alive_until: renewed,
            }
        }
        Some(_) => PlaceStep::Keep,
    }
}

/// One held position of a lease, as a store that keeps a row per position
/// reads it back.
#[derive(Debug, Clone)]
pub struct LeaseRow {
    /// The lease's id.
    pub lease: LeaseId,
    /// The position this row holds.
    pub position: u32,
    /// The lease's fencing token.
    pub token: u64,
    /// When the lease expires.
    pub expires_at: SystemTime,
    /// The owner label given at borrow, if any (on the lowest row of a
    /// lease of several slots at least).
    pub owner: Option<String>,
    /// The idempotency key given at borrow, if any, as it is listed.
    pub key: Option<String>,
    /// The session the lease is bound to, if any.
    pub session: Option<SessionId>,
}

/// The leases of `pool` that `rows` make up, one per lease id, in the order
/// of each lease's first row: a lease of several slots gathers its
/// rows' positions, and its labels are those of its first row that has
/// any.
pub fn holders_from_rows(pool: PoolId, rows: impl IntoIterator<Item = LeaseRow>) -> Vec<Holder> {
    let mut leases: Vec<(LeaseRow, Vec<u32>)> = Vec::new();
    for row in rows {
        match leases
            .iter_mut()
            .find(|(first, _)| first.lease == row.lease)
        {
            Some((first, positions)) => {
                positions.push(row.position);
                if first.owner.is_none() && first.key.is_none() {
                    (first.owner, first.key) = (row.owner, row.key);
                }
            }
            None => {
                let position = row.position;
                leases.push((row, vec![position]));
            }
        }
    }
    leases
        .into_iter()
        .map(|(row, positions)| {
            let positions =
                Positions::new(positions).unwrap_or_else(|| Positions::one(row.position));
            let lease = Lease::holding(row.lease, pool, positions, row.token, row.expires_at)
                .with_session(row.session);
            Holder::new(lease, row.owner, row.key)
        })
        .collect()
}

/// Adds the options every networked store (PostgreSQL, Redis, MySQL) takes
/// to its options type, with their docs: `clock`, `manual_clock` (behind
/// the store crate's own `test-util` feature) and `session_timeout`.
///
/// The type must have the fields `time: DecidingClock` and
/// `session_timeout: Option<Duration>`, and check the latter with
/// [`check_session_timeout`](crate::store::check_session_timeout).
/// `$steps` names what carries the deciding clock's time in test mode
/// ("statement", "script"); `$place` what the stores share ("tables").
#[macro_export]
macro_rules! networked_store_options {
    ($options:ident, $steps:literal, $place:literal) => {
        impl $options {
            /// This process's clock, from which the store's view of the
            /// server's clock is made (an upper bound from its readings,
            /// [`ServerClock`](semaphore_core::store::ServerClock)); by
            /// default the machine's monotonic clock, which does not step
            /// ([`MonotonicClock`](semaphore_core::MonotonicClock)). It
            /// never decides expiry: the server does, so a process whose
            /// clock is off can neither over-issue nor take a live lease
            /// (rule "Time").
            pub fn clock(mut self, local: ::std::sync::Arc<dyn $crate::Clock>) -> Self {
                self.time = $crate::store::DecidingClock::Server(::std::sync::Arc::new(
                    $crate::store::ServerClock::new(local),
                ));
                self
            }

            #[doc = concat!(
                "Test mode (feature `test-util`): `clock` decides expiry, passed into every ",
                $steps,
                " in place of the server's clock, and times every wait, so that tests move ",
                "time without sleeping. Every store on the ",
                $place,
                " must then share this clock: never use it in production."
            )]
            #[cfg(feature = "test-util")]
            pub fn manual_clock(mut self, clock: ::std::sync::Arc<$crate::ManualClock>) -> Self {
                self.time = $crate::store::DecidingClock::Manual(clock);
                self
            }

            /// The session timeout: how long the store's
            /// session, which holds its bound leases, outlives its last
            /// heartbeat on the server's clock. A connection that drops and
            /// comes back within it keeps every bound lease; a process
            /// killed outright loses them within it. The store heartbeats
            /// every third of it. Default 10 s (in test mode, the longest
            /// there is); at least
            /// [`MIN_SESSION_TIMEOUT`](semaphore_core::store::MIN_SESSION_TIMEOUT)
            /// (1 s), else refused at connect naming `session_timeout`.
            pub fn session_timeout(mut self, timeout: ::std::time::Duration) -> Self {
                self.session_timeout = Some(timeout);
                self
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_place_joins_then_is_refreshed_only_past_half_its_life() {
        assert_eq!(
            place_step(1_000, None, None),
            PlaceStep::Join {
                alive_until: 1_000 + WAITER_TTL_MS
            }
        );
        let alive = 1_000 + WAITER_TTL_MS;
        assert_eq!(place_step(1_100, Some(alive), None), PlaceStep::Keep);
        let late = alive - WAITER_TTL_MS / 2 + 1;
        assert_eq!(
            place_step(late, Some(alive), None),
            PlaceStep::Refresh {
                alive_until: late + WAITER_TTL_MS
            }
        );
    }

    #[test]
    fn a_held_place_is_refreshed_by_every_look() {
        let hold = Some(Duration::from_secs(30));
        assert_eq!(
            place_step(1_000, Some(30_000), hold),
            PlaceStep::Refresh {
                alive_until: 31_000
            }
        );
    }

    #[test]
    fn prefixes_and_intervals_out_of_range_name_their_field() {
        assert!(check_prefix("prefix", "a-b.c", 64, "-.").is_ok());
        let err = check_prefix("table_prefix", "a-b", 32, "").unwrap_err();
        assert!(matches!(
            err,
            Error::InvalidArgument {
                field: "table_prefix",
                ..
            }
        ));
        assert!(check_prefix("table_prefix", "", 32, "").is_err());
        assert!(check_prefix("table_prefix", &"a".repeat(33), 32, "").is_err());
        assert!(check_poll_interval(Duration::from_millis(100)).is_ok());
        let err = check_poll_interval(Duration::from_secs(2)).unwrap_err();
        assert!(matches!(
            err,
            Error::InvalidArgument {
                field: "poll_interval",
                ..
            }
        ));
        assert!(check_pool_size(0).is_err());
    }
}
