//! The store's primitives as SQL on one connection, each meant to run inside
//! one transaction the caller opened (`BEGIN IMMEDIATE` for writes).
//!
//! Times are integer unix milliseconds. `now` is the deciding instant, read
//! by the store inside the transaction (see [`time`](crate::time)); new
//! expiries are that `now` plus the request's ttl, saturating.

use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};

use crate::holder::Holders;
use crate::time::{instant, plus};
use crate::wake::queue::{drop_dead_heads, forget_waiter, keep_place};
pub(crate) use leases::{Keyed, force_return, holders, keyed, unbind};
use leases::{holders_of, in_use, keyed_holder, reap_gone, row};
use semaphore_core::store::{BorrowRequest, TryBorrow};
use semaphore_core::{Error, Lease, LeaseId, PoolId, PoolState, Positions};

fn count_of(conn: &Connection, pool: &PoolId) -> rusqlite::Result<Option<u32>> {
    Ok(pool_row(conn, pool)?.map(|(count, _)| count))
}

/// The pool's count and whether it drains; `None` if it does not exist.
fn pool_row(conn: &Connection, pool: &PoolId) -> rusqlite::Result<Option<(u32, bool)>> {
    conn.prepare_cached("SELECT count, draining FROM semaphore_pools WHERE pool = ?1")?
        .query_row([pool.as_uuid().as_bytes()], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
}

/// Starts or ends the pool's drain; its state, or `None` if it does not
/// exist.
pub(crate) fn set_draining(
    conn: &Connection,
    pool: PoolId,
    draining: bool,
    now: i64,
    holders: &Holders,
) -> rusqlite::Result<Option<PoolState>> {
    conn.prepare_cached("UPDATE semaphore_pools SET draining = ?2 WHERE pool = ?1")?
        .execute(params![pool.as_uuid().as_bytes(), draining])?;
    inspect(conn, pool, now, holders)
}

/// Runs `f` inside a savepoint of its own: all of it, or, on an error,
/// none of it, leaving the enclosing transaction as it was.
pub(crate) fn in_savepoint<T, E: From<rusqlite::Error>>(
    conn: &Connection,
    f: impl FnOnce(&Connection) -> Result<T, E>,
) -> Result<T, E> {
    conn.execute_batch("SAVEPOINT semaphore_step")?;
    match f(conn) {
        Ok(out) => {
            conn.execute_batch("RELEASE semaphore_step")?;
            Ok(out)
        }
        Err(e) => {
            conn.execute_batch("ROLLBACK TO semaphore_step; RELEASE semaphore_step")?;
            Err(e)
        }
    }
}

/// Creates the pool or sets its count.
pub(crate) fn register(
    conn: &Connection,
    pool: PoolId,
    count: u32,
    now: i64,
    holders: &Holders,
) -> rusqlite::Result<PoolState> {
    conn.prepare_cached(
        "INSERT INTO semaphore_pools (pool, count) VALUES (?1, ?2)
         ON CONFLICT (pool) DO UPDATE SET count = excluded.count",
    )?
    .execute(params![pool.as_uuid().as_bytes(), count])?;
    Ok(inspect(conn, pool, now, holders)?.unwrap_or_else(|| PoolState::new(pool, count, 0)))
}

/// The pool's state at `now`, or `None` if it does not exist.
pub(crate) fn inspect(
    conn: &Connection,
    pool: PoolId,
    now: i64,
    holders: &Holders,
) -> rusqlite::Result<Option<PoolState>> {
    let Some((count, draining)) = pool_row(conn, &pool)? else {
        return Ok(None);
    };
    let in_use = in_use(conn, &pool, now, holders)?;
    let queued = crate::wake::queue::queued(conn, pool, now)?;
    Ok(Some(
        PoolState::new(pool, count, in_use)
            .with_draining(draining)
            .with_queued(queued),
    ))
}

/// Removes the pool, its leases and its queued heads.
pub(crate) fn delete(conn: &Connection, pool: PoolId) -> rusqlite::Result<bool> {
    let key = pool.as_uuid().as_bytes();
    conn.prepare_cached("DELETE FROM semaphore_leases WHERE pool = ?1")?
        .execute([key])?;
    conn.prepare_cached("DELETE FROM semaphore_waiters WHERE pool = ?1")?
        .execute([key])?;
    Ok(conn
        .prepare_cached("DELETE FROM semaphore_pools WHERE pool = ?1")?
        .execute([key])?
        > 0)
}

/// Ends an active lease; `false` for anything else.
pub(crate) fn return_lease(
    conn: &Connection,
    pool: PoolId,
    lease: LeaseId,
    now: i64,
) -> rusqlite::Result<bool> {
    Ok(conn
        .prepare_cached(
            "DELETE FROM semaphore_leases WHERE lease = ?1 AND pool = ?2 AND expires_at > ?3",
        )?
        .execute(params![
            lease.as_uuid().as_bytes(),
            pool.as_uuid().as_bytes(),
            now
        ])?
        > 0)
}

/// A return of a lease known whole: its rows found by `(pool, position)`, the
/// primary key (a range of it for a lease of several slots), rather
/// than by scanning the pool's rows for its id.
pub(crate) fn return_held(conn: &Connection, lease: &Lease, now: i64) -> rusqlite::Result<bool> {
    let highest = lease.positions.last().copied().unwrap_or(lease.position);
    Ok(conn
        .prepare_cached(
            "DELETE FROM semaphore_leases
             WHERE pool = ?1 AND position BETWEEN ?2 AND ?3 AND lease = ?4 AND expires_at > ?5",
        )?
        .execute(params![
            lease.pool.as_uuid().as_bytes(),
            lease.position,
            highest,
            lease.id.as_uuid().as_bytes(),
            now
        ])?
        > 0)
}

/// Grants the request's number of slots, the lowest
/// free, if they are free for this borrower, or says when the earliest
/// lease expires; the inner error is `PoolNotFound` or `Draining` when the
/// pool does not exist or drains (and nothing was written, but a held
/// place's, which keeps its turn through a drain).
///
/// Free slots go first to the heads queued in the store, oldest first: a
/// borrower of `n` is granted only if `n` slots are free beyond those owed
/// to the heads queued ahead of it (each owed its own weight). A head that
/// is refused takes (or keeps) its place. An attempt that is
/// refused writes nothing unless it reaps expired rows, joins the queue, or
/// refreshes its place, so that waiters re-checking do not wake each other.
///
/// A request whose key names an active lease is answered with it, as is.
/// Tokens are above both the stored counter and `floor` (see
/// [`SqliteStore`](crate::SqliteStore)'s caller-owned transactions). A
/// grant expires at `now` plus the request's ttl, and a bound request's
/// lease names this handle's holder. An attempt that would be
/// refused first frees the leases of holders that are gone.
pub(crate) fn try_borrow(
    conn: &Connection,
    request: &BorrowRequest,
    floor: u64,
    now: i64,
    holders: &Holders,
) -> rusqlite::Result<Result<TryBorrow, Error>> {
    let pool = request.pool;
    let key = pool.as_uuid().as_bytes();
    // The pool, its queue and its leases in one statement: how many wait
    // and how many of those are dead (their process stopped polling); how
    // many rows the pool holds, how many of them expired, and the highest
    // position held (for `lowest_free`). The expired are deleted only if
    // there are any (schema v3 has no expiry index to find them by). The
    // leases' aggregate is always one row, so the join has one row exactly
    // when the pool exists.
    let Some((count, draining, queued, dead, rows, expired, highest)) = conn
        .prepare_cached(
            "SELECT p.count, p.draining,
                 (SELECT COUNT(*) FROM semaphore_waiters WHERE pool = ?1),
                 (SELECT COUNT(*) FROM semaphore_waiters WHERE pool = ?1 AND alive_until <= ?2),
                 l.held, l.expired, l.highest
             FROM semaphore_pools AS p,
                 (SELECT COUNT(*) AS held, COUNT(*) FILTER (WHERE expires_at <= ?2) AS expired,
                     MAX(position) AS highest
                  FROM semaphore_leases WHERE pool = ?1) AS l
             WHERE p.pool = ?1",
        )?
        .query_row(params![key, now], |r| {
            Ok((
                r.get::<_, u32>(0)?,
                r.get(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, i64>(4)?,
                r.get::<_, i64>(5)?,
                r.get::<_, Option<i64>>(6)?,
            ))
        })
        .optional()?
    else {
        return Ok(Err(Error::PoolNotFound { pool }));
    };
    if draining {
        if let (Some(w), Some(_)) = (request.waiter, request.hold) {
            // A held place keeps its turn through the drain (R11): taken
            // or refreshed as a refusal would.
            if dead > 0 {
                conn.prepare_cached(
                    "DELETE FROM semaphore_waiters WHERE pool = ?1 AND alive_until <= ?2",
                )?
                .execute(params![key, now])?;
            }
            let w = *w.as_uuid().as_bytes();
            let alive: Option<i64> = conn
                .prepare_cached(
                    "SELECT alive_until FROM semaphore_waiters WHERE pool = ?1 AND waiter = ?2",
                )?
                .query_row(params![key, w], |r| r.get(0))
                .optional()?;
            keep_place(conn, key, &w, request.slots, now, alive, request.hold)?;
        }
        return Ok(Err(Error::Draining { pool }));
    }
    // The highest position held, while no row was deleted since it was read.
    let mut highest = Some(highest);
    if expired > 0 {
        conn.prepare_cached("DELETE FROM semaphore_leases WHERE pool = ?1 AND expires_at <= ?2")?
            .execute(params![key, now])?;
        highest = None;
    }
    let mut held = rows - expired;
    if dead > 0 {
        conn.prepare_cached("DELETE FROM semaphore_waiters WHERE pool = ?1 AND alive_until <= ?2")?
            .execute(params![key, now])?;
    }
    let queued = queued > dead;
    let waiter = request.waiter.map(|w| *w.as_uuid().as_bytes());
    if keyed_holder(conn, key, request.key.as_deref(), now)?.is_some_and(|h| holders.is_gone(&h)) {
        // The key's lease died with its holder: the key borrows anew.
        held -= reap_gone(conn, key, now, holders)?;
        highest = None;
    }
    // Lost replies: a retry under the same lease id gets what it was
    // granted (a caller that lost the answer: rule "HTTP").
    let mine = match request.retried {
        true => leases::by_id(conn, pool, request.lease, now)?,
        false => None,
    };
    let keyed = match mine {
        Some(lease) => Some(lease),
        None => match keyed(conn, pool, request.key.as_deref(), now)? {
            Keyed::Same(lease) => Some(lease),
            Keyed::Reused => return Ok(Err(Error::KeyReused { pool })),
            Keyed::No => None,
        },
    };
    if let Some(lease) = keyed {
        if let Some(w) = &waiter {
            forget_waiter(conn, key, w)?;
        }
        return Ok(Ok(TryBorrow::Granted { lease }));
    }
    let mut free = i64::from(count).saturating_sub(held);

    let mine: Option<(i64, i64)> = match &waiter {
        Some(w) if queued => conn
            .prepare_cached(
                "SELECT ticket, alive_until FROM semaphore_waiters WHERE pool = ?1 AND waiter = ?2",
            )?
            .query_row(params![key, w], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?,
        _ => None,
    };
    let my_ticket = mine.map_or(i64::MAX, |m| m.0);
    // A head whose weight exceeds the count keeps its place
    // but is owed nothing while the count is below it.
    let mut ahead: i64 = if queued {
        conn.prepare_cached(
            "SELECT COALESCE(SUM(slots), 0) FROM semaphore_waiters
             WHERE pool = ?1 AND ticket < ?2 AND slots <= ?3",
        )?
        .query_row(params![key, my_ticket, count], |r| r.get(0))?
    } else {
        0
    };
    let n = i64::from(request.slots.max(1));
    if ahead > 0 && free >= n {
        ahead -= drop_dead_heads(conn, key, my_ticket, i64::from(count))?;
    }
    if free - ahead < n {
        let freed = reap_gone(conn, key, now, holders)?;
        if freed > 0 {
            highest = None;
        }
        held -= freed;
        free = i64::from(count).saturating_sub(held);
    }

    if free - ahead >= n {
        let positions = lowest_free(conn, key, held, highest, request.slots.max(1))?;
        // Not `UPDATE .. RETURNING`: SQLite runs that under a statement
        // journal, whose buffers, freed at every grant, had glibc give
        // the heap's top back to the kernel and fault it in again (a
        // `brk` pair and a page fault a grant: 18% of a pair's time).
        conn.prepare_cached(
            "UPDATE semaphore_store SET last_token = MAX(last_token, ?1) + 1 WHERE id = 1",
        )?
        .execute([i64::try_from(floor).unwrap_or(i64::MAX)])?;
        let token: i64 = conn
            .prepare_cached("SELECT last_token FROM semaphore_store WHERE id = 1")?
            .query_row([], |r| r.get(0))?;
        let expires_at = plus(now, request.ttl);
        let holder = request.bound.then(|| holders.mine(conn)).flatten();
        let mut insert = conn.prepare_cached(
            "INSERT INTO semaphore_leases (pool, position, lease, token, expires_at, owner, borrow_key, holder)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?;
        for (i, position) in positions.iter().enumerate() {
            // The labels go on the lowest position's row only (schema v4).
            let (owner, borrow_key) = match i {
                0 => (request.owner.as_deref(), request.key.as_deref()),
                _ => (None, None),
            };
            insert.execute(params![
                key,
                position,
                request.lease.as_uuid().as_bytes(),
                token,
                expires_at,
                owner,
                borrow_key,
                holder
            ])?;
        }
        if let Some(w) = &waiter {
            forget_waiter(conn, key, w)?;
        }
        let lease = Lease::holding(
            request.lease,
            pool,
            positions,
            token.unsigned_abs(),
            instant(expires_at),
        );
        return Ok(Ok(TryBorrow::Granted { lease }));
    }

    if let Some(w) = &waiter {
        keep_place(
            conn,
            key,
            w,
            request.slots,
            now,
            mine.map(|m| m.1),
            request.hold,
        )?;
    }
    Ok(Ok(TryBorrow::Exhausted {
        next_expiry: next_expiry(conn, key, now)?,
    }))
}

/// The `n` lowest positions below the count that no lease holds
/// (`lowest_free_n`), given that `n` are free and `held` slots are active
/// (expired rows were reaped); `highest` is the highest position held,
/// if it was read since the last row was deleted.
///
/// Positions fill from the bottom, so they are most often dense: `0..held`,
/// which the largest position tells in one index lookup, and the answer is
/// `held..held + n`. Otherwise the gaps in key order come first; the scan
/// stops once it has found `n`.
fn lowest_free(
    conn: &Connection,
    key: &[u8],
    held: i64,
    highest: Option<Option<i64>>,
    n: u32,
) -> rusqlite::Result<Positions> {
    let highest = match highest {
        Some(highest) => highest,
        None => conn
            .prepare_cached("SELECT MAX(position) FROM semaphore_leases WHERE pool = ?1")?
            .query_row([key], |r| r.get(0))?,
    };
    let mut free = Vec::with_capacity(n as usize);
    let mut next = 0u32;
    if highest.is_none_or(|h| h + 1 == held) {
        next = u32::try_from(held).unwrap_or(u32::MAX);
    } else {
        let mut positions = conn.prepare_cached(
            "SELECT position FROM semaphore_leases WHERE pool = ?1 ORDER BY position",
        )?;
        let mut rows = positions.query([key])?;
        while free.len() < n as usize
            && let Some(row) = rows.next()?
        {
            let taken: u32 = row.get(0)?;
            free.extend((next..taken).take(n as usize - free.len()));
            next = taken.saturating_add(1);
        }
    }
    free.extend((next..).take(n as usize - free.len()));
    Ok(Positions::new(free).unwrap_or_else(|| Positions::one(next)))
}

/// The earliest expiry among `pool`'s leases active at `now`.
fn next_expiry(
    conn: &Connection,
    key: &[u8],
    now: i64,
) -> rusqlite::Result<Option<std::time::SystemTime>> {
    let at: Option<i64> = conn
        .prepare_cached(
            "SELECT MIN(expires_at) FROM semaphore_leases WHERE pool = ?1 AND expires_at > ?2",
        )?
        .query_row(params![key, now], |r| r.get(0))?;
    Ok(at.map(instant))
}

/// Moves an active lease's expiry to `now + ttl`; `None` if the pool does
/// not exist, `Some(None)` if the lease is not active.
pub(crate) fn renew(
    conn: &Connection,
    pool: PoolId,
    lease: LeaseId,
    now: i64,
    ttl: Duration,
) -> rusqlite::Result<Option<Option<Lease>>> {
    let expires_at = plus(now, ttl);
    if count_of(conn, &pool)?.is_none() {
        return Ok(None);
    }
    let (id, key) = (lease.as_uuid().as_bytes(), pool.as_uuid().as_bytes());
    // Then read back (the rows renewed: those with the new expiry), not
    // `RETURNING`: see the token's statement in `try_borrow`.
    let renewed = conn
        .prepare_cached(
            "UPDATE semaphore_leases SET expires_at = ?4
             WHERE lease = ?1 AND pool = ?2 AND expires_at > ?3",
        )?
        .execute(params![id, key, now, expires_at])?;
    if renewed == 0 {
        return Ok(Some(None));
    }
    let rows = conn
        .prepare_cached(
            "SELECT lease, position, token, expires_at, owner, borrow_key
             FROM semaphore_leases WHERE lease = ?1 AND pool = ?2 AND expires_at = ?3",
        )?
        .query_map(params![id, key, expires_at], row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(Some(holders_of(rows, pool).pop().map(|h| h.lease)))
}

mod all;
mod leases;
mod list;
#[cfg(test)]
mod tests;

pub(crate) use all::try_borrow_all;
pub(crate) use list::pools;
