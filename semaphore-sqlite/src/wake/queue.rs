//! The cross-process queue of heads: each process's head
//! waiter keeps a place in `semaphore_waiters` while it waits, first come
//! first served, refreshed by its re-checks and dropped when its process is
//! gone.

use std::time::Duration;

use rusqlite::{Connection, params};
use semaphore_core::PoolId;
use semaphore_core::store::{PlaceStep, WaiterId, place_step};

use crate::wake::liveness;

/// Forgets a queued head's place.
pub(crate) fn leave_queue(
    conn: &Connection,
    pool: PoolId,
    waiter: WaiterId,
) -> rusqlite::Result<bool> {
    Ok(conn
        .prepare_cached("DELETE FROM semaphore_waiters WHERE pool = ?1 AND waiter = ?2")?
        .execute(params![
            pool.as_uuid().as_bytes(),
            waiter.as_uuid().as_bytes()
        ])?
        > 0)
}

pub(crate) fn forget_waiter(
    conn: &Connection,
    pool: &[u8],
    waiter: &[u8; 16],
) -> rusqlite::Result<()> {
    conn.prepare_cached("DELETE FROM semaphore_waiters WHERE pool = ?1 AND waiter = ?2")?
        .execute(params![pool, waiter])?;
    Ok(())
}

/// Drops the heads queued ahead of `ticket` whose process is gone (see
/// [`liveness`](crate::wake::liveness)); the slots they were owed (none for
/// a head whose weight is over `count`).
pub(crate) fn drop_dead_heads(
    conn: &Connection,
    key: &[u8],
    ticket: i64,
    count: i64,
) -> rusqlite::Result<i64> {
    let dead: Vec<(Vec<u8>, i64)> = conn
        .prepare_cached(
            "SELECT waiter, pid, pid_ns, slots FROM semaphore_waiters WHERE pool = ?1 AND ticket < ?2",
        )?
        .query_map(params![key, ticket], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get::<_, Option<String>>(2)?,
                r.get(3)?,
            ))
        })?
        .filter_map(|row| match row {
            Ok((w, pid, ns, slots)) if liveness::is_gone(pid, ns.as_deref()) => Some(Ok((w, slots))),
            Ok(_) => None,
            Err(e) => Some(Err(e)),
        })
        .collect::<rusqlite::Result<_>>()?;
    for (w, _) in &dead {
        conn.prepare_cached("DELETE FROM semaphore_waiters WHERE pool = ?1 AND waiter = ?2")?
            .execute(params![key, w])?;
    }
    // Only the weights that were owed (not those over the count).
    Ok(dead
        .iter()
        .map(|(_, slots)| *slots)
        .filter(|slots| *slots <= count)
        .sum())
}

/// A refused head of `slots` slots joins the store's queue of `pool`, or
/// refreshes its place when less than half of
/// [`WAITER_TTL`](semaphore_core::store::WAITER_TTL) is left of it
/// (`alive_until`). A held place (`hold`, see
/// [`BorrowRequest::hold`](semaphore_core::BorrowRequest::hold)) lives
/// until `hold` after every attempt, and names no process.
pub(crate) fn keep_place(
    conn: &Connection,
    key: &[u8],
    w: &[u8; 16],
    slots: u32,
    now: i64,
    alive_until: Option<i64>,
    hold: Option<Duration>,
) -> rusqlite::Result<()> {
    let (pid, namespace) = match hold {
        None => (
            Some(liveness::me().pid),
            Some(liveness::me().namespace.as_str()),
        ),
        Some(_) => (None, None),
    };
    match place_step(now, alive_until, hold) {
        PlaceStep::Join { alive_until } => {
            conn.prepare_cached(
                "INSERT INTO semaphore_waiters (pool, waiter, ticket, alive_until, pid, pid_ns, slots, since)
                 VALUES (?1, ?2, (SELECT COALESCE(MAX(ticket), 0) + 1 FROM semaphore_waiters WHERE pool = ?1), ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![key, w, alive_until, pid, namespace, slots, now])?;
        }
        PlaceStep::Refresh { alive_until } => {
            conn.prepare_cached(
                "UPDATE semaphore_waiters SET alive_until = ?3 WHERE pool = ?1 AND waiter = ?2",
            )?
            .execute(params![key, w, alive_until])?;
        }
        PlaceStep::Keep => {}
    }
    Ok(())
}

/// The place of `waiter` in the queue of `pool` at `now`: 1 for the first
/// live place; `None` if it has no live place.
pub(crate) fn place(
    conn: &Connection,
    pool: PoolId,
    waiter: WaiterId,
    now: i64,
) -> rusqlite::Result<Option<u64>> {
    let found: i64 = conn
        .prepare_cached(
            "SELECT COUNT(*) FROM semaphore_waiters w, semaphore_waiters me
             WHERE me.pool = ?1 AND me.waiter = ?2 AND me.alive_until > ?3
             AND w.pool = ?1 AND w.alive_until > ?3 AND w.ticket <= me.ticket",
        )?
        .query_row(
            params![pool.as_uuid().as_bytes(), waiter.as_uuid().as_bytes(), now],
            |r| r.get(0),
        )?;
    Ok((found > 0).then_some(found.unsigned_abs()))
}

/// The live places of the queue of `pool` at `now`, first served first
/// ([`Store::queue`](semaphore_core::store::Store::queue)): a held place
/// names no process; a head whose process is gone is left out (the next
/// borrow drops it). A place taken by a version 4 process has no `since`:
/// `now` stands in.
pub(crate) fn queue(
    conn: &Connection,
    pool: PoolId,
    now: i64,
) -> rusqlite::Result<Vec<semaphore_core::QueuedPlace>> {
    let mut rows = conn.prepare_cached(
        "SELECT waiter, slots, COALESCE(since, ?2), pid, pid_ns FROM semaphore_waiters
         WHERE pool = ?1 AND alive_until > ?2 ORDER BY ticket",
    )?;
    let mut rows = rows.query(params![pool.as_uuid().as_bytes(), now])?;
    let mut places = Vec::new();
    while let Some(row) = rows.next()? {
        let (pid, namespace): (Option<i64>, Option<String>) = (row.get(3)?, row.get(4)?);
        if pid.is_some() && liveness::is_gone(pid, namespace.as_deref()) {
            continue;
        }
        let waiter: [u8; 16] = row.get(0)?;
        places.push(semaphore_core::QueuedPlace::kept(
            WaiterId::from_uuid(uuid::Uuid::from_bytes(waiter)),
            row.get(1)?,
            crate::time::instant(row.get(2)?),
            pid.is_none(),
        ));
    }
    Ok(places)
}

/// The number of live places in the queue of `pool` at `now`
/// ([`PoolState::queued`](semaphore_core::PoolState::queued)).
pub(crate) fn queued(conn: &Connection, pool: PoolId, now: i64) -> rusqlite::Result<u32> {
    queue_heads(conn, pool, now)
}

/// The number of queued heads of `pool` alive at `now`: one per store
/// handle (normally one per process) with borrowers waiting.
pub(crate) fn queue_heads(conn: &Connection, pool: PoolId, now: i64) -> rusqlite::Result<u32> {
    conn.prepare_cached(
        "SELECT COUNT(*) FROM semaphore_waiters WHERE pool = ?1 AND alive_until > ?2",
    )?
    .query_row(params![pool.as_uuid().as_bytes(), now], |r| r.get(0))
}

/// The processes of this pid namespace whose heads queue on `pool` alive
/// at `now`, to be rung after a commit that can let one in (see
/// [`doorbell`](crate::wake::doorbell)). Filtered here rather than in SQL: with
/// `DISTINCT` and the extra terms the statement cost a return 12-18 µs
/// even with no row to find.
pub(crate) fn processes_queued(
    conn: &Connection,
    pool: PoolId,
    now: i64,
) -> rusqlite::Result<Vec<i64>> {
    let me = liveness::me();
    let mut found = Vec::new();
    let mut rows = conn
        .prepare_cached("SELECT pid, pid_ns, alive_until FROM semaphore_waiters WHERE pool = ?1")?;
    let mut rows = rows.query([pool.as_uuid().as_bytes()])?;
    while let Some(row) = rows.next()? {
        let (pid, alive_until): (Option<i64>, i64) = (row.get(0)?, row.get(2)?);
        let ours = row.get_ref(1)?.as_str_or_null()? == Some(me.namespace.as_str());
        if let Some(pid) = pid.filter(|pid| ours && alive_until > now && !found.contains(pid)) {
            found.push(pid);
        }
    }
    Ok(found)
}
