//! A borrow decided over one look at a pool (rules R6, R10, R11, R15,
//! R16, "Queued heads", "Held places", "Idempotency keys"): the same steps,
//! in the same order, as the SQL stores' borrow, as a pure function the
//! transaction that writes its outcome is conditioned on.

use semaphore_core::store::{
    BorrowRequest, MAX_UNIX_MS, PlaceStep, key_name, lowest_free_n, place_step,
};
use semaphore_core::{Lease, Positions};

use crate::view::{Look, PoolView};

/// What a borrow of one pool comes to.
#[derive(Debug, Clone)]
pub(crate) enum Decision {
    /// The pool does not exist.
    NoPool,
    /// The pool drains; a held place is taken or kept all the same.
    Draining { place: Option<PlaceWrite> },
    /// The key names an active lease of another request.
    KeyReused,
    /// The request's session has ended: nothing is granted.
    SessionEnded,
    /// The request was granted before (a retry after a lost reply, or a
    /// keyed retry): that lease, unchanged, and the etcd lease that ends
    /// it (0 in test mode).
    Answer { lease: Lease, etcd_lease: i64 },
    /// No room: the waiter's place, and when an active lease next ends
    /// (test mode only: in production etcd's deletes wake).
    Refused {
        place: Option<PlaceWrite>,
        next_expiry: Option<u64>,
    },
    /// Granted: these positions, until `expires` (unix ms).
    Grant { positions: Positions, expires: u64 },
}

/// A place the borrow takes (`join`) or keeps alive, until `alive_until`
/// (unix ms).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlaceWrite {
    pub(crate) join: bool,
    pub(crate) alive_until: u64,
}

fn place_write(
    view: &PoolView,
    look: &Look,
    request: &BorrowRequest,
    now: u64,
) -> Option<PlaceWrite> {
    let waiter = request.waiter?;
    let mine = view
        .live_places(look)
        .find(|row| row.id == *waiter.as_uuid())
        .map(|row| i64::try_from(row.rec.alive_until).unwrap_or(i64::MAX));
    let now = i64::try_from(now).unwrap_or(i64::MAX);
    let until = |at: i64| at.max(0).unsigned_abs();
    match place_step(now, mine, request.hold) {
        PlaceStep::Join { alive_until } => Some(PlaceWrite {
            join: true,
            alive_until: until(alive_until),
        }),
        PlaceStep::Refresh { alive_until } => Some(PlaceWrite {
            join: false,
            alive_until: until(alive_until),
        }),
        PlaceStep::Keep => None,
    }
}

/// Decides `request` over `view`. `now` is the instant the records' times
/// are set from (unix ms): the test's clock, or this process's in
/// production, where it only dates records (etcd judges).
pub(crate) fn decide(view: &PoolView, look: &Look, request: &BorrowRequest, now: u64) -> Decision {
    let Some((meta, _)) = view.meta else {
        return Decision::NoPool;
    };
    if meta.draining {
        let place = request
            .hold
            .is_some()
            .then(|| place_write(view, look, request, now))
            .flatten();
        return Decision::Draining { place };
    }
    // The request's own lease (its reply was lost), then its key's.
    if let Some(row) = view
        .active(look)
        .find(|row| row.id == *request.lease.as_uuid())
    {
        return Decision::Answer {
            lease: view.lease(row),
            etcd_lease: row.rec.etcd_lease,
        };
    }
    if let Some(key) = request.key.as_deref() {
        let name = key_name(key);
        let keyed = view.active(look).find(|row| {
            row.rec
                .key
                .as_deref()
                .is_some_and(|stored| key_name(stored) == name)
        });
        if let Some(row) = keyed {
            if row.rec.key.as_deref() == Some(key) {
                return Decision::Answer {
                    lease: view.lease(row),
                    etcd_lease: row.rec.etcd_lease,
                };
            }
            return Decision::KeyReused;
        }
    }
    let held = i64::from(view.in_use(look));
    let count = i64::from(meta.count);
    // The slots owed to the live places ahead (all of them for a borrower
    // with no place), none to a place whose weight is over the count.
    let mine = request.waiter.and_then(|w| {
        view.live_places(look)
            .find(|row| row.id == *w.as_uuid())
            .map(|row| row.created)
    });
    let ahead: i64 = view
        .live_places(look)
        .filter(|row| mine.is_none_or(|turn| row.created < turn))
        .filter(|row| row.rec.slots <= meta.count)
        .map(|row| i64::from(row.rec.slots))
        .sum();
    let slots = i64::from(request.slots.max(1));
    let positions = (count - held - ahead >= slots)
        .then(|| {
            let taken = view
                .active(look)
                .flat_map(|row| row.rec.positions.iter().copied());
            lowest_free_n(meta.count, taken, request.slots.max(1))
        })
        .flatten();
    let Some(positions) = positions else {
        let next_expiry = look
            .now
            .and_then(|_| view.active(look).map(|row| look.ends(&row.rec)).min());
        return Decision::Refused {
            place: place_write(view, look, request, now),
            next_expiry,
        };
    };
    // No lease is born dead.
    if request
        .session
        .is_some_and(|s| !look.session_live(s.as_uuid()))
    {
        return Decision::SessionEnded;
    }
    let ttl = u64::try_from(request.ttl.as_millis()).unwrap_or(u64::MAX);
    Decision::Grant {
        positions,
        expires: now.saturating_add(ttl).min(MAX_UNIX_MS),
    }
}

/// How long, in whole seconds, an etcd lease must live to outlast
/// `until` (unix ms) from `now` by [`MARGIN_MS`] at least: at least 1.
///
/// The margin keeps R17 with room to spare: this process counts a lease's
/// or a session's end from before its request left, etcd from when the
/// leader handled it, and etcd's leader revokes what lapsed as soon as it
/// looks (every 500 ms): without it the two ends were a network's
/// one-way trip apart, and the fault suite saw a holder act in the same
/// millisecond as the next grant.
pub(crate) fn ttl_seconds(now: u64, until: u64) -> i64 {
    let ms = until.saturating_sub(now).saturating_add(MARGIN_MS);
    i64::try_from(ms.div_ceil(1000))
        .unwrap_or(i64::MAX)
        .min(MAX_ETCD_TTL_SECONDS)
}

/// The least by which an etcd lease outlives what this process counts.
pub(crate) const MARGIN_MS: u64 = 500;

/// The longest TTL etcd grants a lease, in seconds (its `MaxLeaseTTL`).
pub(crate) const MAX_ETCD_TTL_SECONDS: i64 = 9_000_000_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_etcd_lease_outlasts_what_it_bounds_by_the_margin() {
        assert_eq!(ttl_seconds(1_000, 1_001), 1);
        assert_eq!(ttl_seconds(1_000, 1_500), 1);
        assert_eq!(ttl_seconds(1_000, 1_501), 2);
        assert_eq!(ttl_seconds(1_000, 3_000), 3);
        assert_eq!(ttl_seconds(5_000, 1_000), 1);
    }
}
