//! A borrow of several pools in one transaction, all or none
//! ([`try_borrow_all`]).

use rusqlite::{Connection, OptionalExtension, params};
use semaphore_core::Error;
use semaphore_core::store::{BorrowRequest, TryBorrow, TryBorrowAll};

use super::{in_savepoint, try_borrow};
use crate::holder::Holders;
use crate::wake::queue::keep_place;

/// All or nothing over several pools: grants every request as
/// [`try_borrow`] would, or none; the error of the first pool that does not
/// exist or drains. Refused heads keep their place in the pools that
/// refused them.
pub(crate) fn try_borrow_all(
    conn: &Connection,
    requests: &[BorrowRequest],
    floor: u64,
    now: i64,
    holders: &Holders,
) -> rusqlite::Result<Result<TryBorrowAll, Error>> {
    // Grants are made one pool at a time and undone whole if any pool
    // refuses; `Err(Ok(..))` carries a refusal out of the savepoint.
    let attempt = in_savepoint(conn, |conn| {
        let mut leases = Vec::with_capacity(requests.len());
        let mut blocked = Vec::new();
        for request in requests {
            match try_borrow(conn, request, floor, now, holders)? {
                Ok(TryBorrow::Granted { lease }) => leases.push(lease),
                Ok(TryBorrow::Exhausted { next_expiry }) => blocked.push((request, next_expiry)),
                Err(e) => return Err(Refused::Not(e)),
            }
        }
        if blocked.is_empty() {
            Ok(leases)
        } else {
            Err(Refused::Blocked(blocked))
        }
    });
    let blocked = match attempt {
        Ok(leases) => return Ok(Ok(TryBorrowAll::Granted { leases })),
        Err(Refused::Not(e)) => return Ok(Err(e)),
        Err(Refused::Sql(e)) => return Err(e),
        Err(Refused::Blocked(blocked)) => blocked,
    };
    for (request, _) in &blocked {
        if let Some(w) = request.waiter.map(|w| *w.as_uuid().as_bytes()) {
            let key = request.pool.as_uuid().as_bytes();
            let alive: Option<i64> = conn
                .prepare_cached(
                    "SELECT alive_until FROM semaphore_waiters WHERE pool = ?1 AND waiter = ?2",
                )?
                .query_row(params![key, w], |r| r.get(0))
                .optional()?;
            keep_place(conn, key, &w, request.slots, now, alive, request.hold)?;
        }
    }
    Ok(Ok(TryBorrowAll::refused(
        blocked.into_iter().map(|(_, at)| at),
    )))
}

/// Why a multi-pool borrow undid its grants.
enum Refused<'a> {
    Blocked(Vec<(&'a BorrowRequest, Option<std::time::SystemTime>)>),
    /// A pool that does not exist or drains.
    Not(Error),
    Sql(rusqlite::Error),
}

impl From<rusqlite::Error> for Refused<'_> {
    fn from(e: rusqlite::Error) -> Self {
        Refused::Sql(e)
    }
}
