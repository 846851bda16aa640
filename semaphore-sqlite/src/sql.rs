//! The store's primitives as SQL on one connection, each meant to run inside
//! one transaction the caller opened (`BEGIN IMMEDIATE` for writes).
//!
//! Times are integer unix milliseconds. `now` is the deciding instant, read
//! by the store inside the transaction (see [`time`](crate::time)); new
//! expiries are that `now` plus the request's ttl, saturating.

use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};

use crate::liveness;
use crate::time::{instant, plus};
use semaphore_core::{
    BorrowRequest, Holder, Lease, LeaseId, PoolId, PoolState, TryBorrow, TryBorrowAll, WaiterId,
};

/// How long a queued head's row stays without being refreshed before other
/// processes treat its process as gone (crashed) and drop it (R11).
pub(crate) const WAITER_TTL: Duration = Duration::from_secs(3);

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn count_of(conn: &Connection, pool: &PoolId) -> rusqlite::Result<Option<u32>> {
    conn.prepare_cached("SELECT count FROM semaphore_pools WHERE pool = ?1")?
        .query_row([pool.as_uuid().as_bytes()], |r| r.get(0))
        .optional()
}

fn in_use(conn: &Connection, pool: &PoolId, now: i64) -> rusqlite::Result<u32> {
    conn.prepare_cached(
        "SELECT COUNT(*) FROM semaphore_leases WHERE pool = ?1 AND expires_at > ?2",
    )?
    .query_row(params![pool.as_uuid().as_bytes(), now], |r| r.get(0))
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

/// R2: creates the pool or sets its count.
pub(crate) fn register(
    conn: &Connection,
    pool: PoolId,
    count: u32,
    now: i64,
) -> rusqlite::Result<PoolState> {
    conn.prepare_cached(
        "INSERT INTO semaphore_pools (pool, count) VALUES (?1, ?2)
         ON CONFLICT (pool) DO UPDATE SET count = excluded.count",
    )?
    .execute(params![pool.as_uuid().as_bytes(), count])?;
    Ok(PoolState::new(pool, count, in_use(conn, &pool, now)?))
}

/// R3: the pool's state at `now`, or `None` if it does not exist.
pub(crate) fn inspect(
    conn: &Connection,
    pool: PoolId,
    now: i64,
) -> rusqlite::Result<Option<PoolState>> {
    let Some(count) = count_of(conn, &pool)? else {
        return Ok(None);
    };
    Ok(Some(PoolState::new(pool, count, in_use(conn, &pool, now)?)))
}

/// R4: removes the pool, its leases and its queued heads.
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

/// R8: ends an active lease; `false` for anything else.
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

/// R12: forgets a queued head's place.
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

/// R5, R6, R10, R11: grants the lowest free slot if a slot is free for this
/// borrower, or says when the earliest lease expires. `None` if the pool does
/// not exist.
///
/// Free slots go first to the heads queued in the store, oldest first: a
/// borrower is granted only if free slots outnumber the heads queued ahead of
/// it. A head that is refused takes (or keeps) its place. An attempt that is
/// refused writes nothing unless it reaps expired rows, joins the queue, or
/// refreshes its place, so that waiters re-checking do not wake each other.
///
/// A request whose key names an active lease is answered with it, as is.
/// Tokens are above both the stored counter and `floor` (see
/// [`SqliteStore`](crate::SqliteStore)'s caller-owned transactions). A
/// grant expires at `now` plus the request's ttl.
pub(crate) fn try_borrow(
    conn: &Connection,
    request: &BorrowRequest,
    floor: u64,
    now: i64,
) -> rusqlite::Result<Option<TryBorrow>> {
    let pool = request.pool;
    let key = pool.as_uuid().as_bytes();
    let Some(count) = count_of(conn, &pool)? else {
        return Ok(None);
    };
    conn.prepare_cached("DELETE FROM semaphore_leases WHERE pool = ?1 AND expires_at <= ?2")?
        .execute(params![key, now])?;
    conn.prepare_cached("DELETE FROM semaphore_waiters WHERE pool = ?1 AND alive_until <= ?2")?
        .execute(params![key, now])?;
    let waiter = request.waiter.map(|w| *w.as_uuid().as_bytes());
    if let Some(lease) = keyed(conn, pool, request.key.as_deref(), now)? {
        if let Some(w) = &waiter {
            forget_waiter(conn, key, w)?;
        }
        return Ok(Some(TryBorrow::Granted { lease }));
    }
    let held: i64 = conn
        .prepare_cached("SELECT COUNT(*) FROM semaphore_leases WHERE pool = ?1")?
        .query_row([key], |r| r.get(0))?;
    let free = i64::from(count).saturating_sub(held);

    let mine: Option<(i64, i64)> = match &waiter {
        Some(w) => conn
            .prepare_cached(
                "SELECT ticket, alive_until FROM semaphore_waiters WHERE pool = ?1 AND waiter = ?2",
            )?
            .query_row(params![key, w], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?,
        None => None,
    };
    let my_ticket = mine.map_or(i64::MAX, |m| m.0);
    let mut ahead: i64 = conn
        .prepare_cached("SELECT COUNT(*) FROM semaphore_waiters WHERE pool = ?1 AND ticket < ?2")?
        .query_row(params![key, my_ticket], |r| r.get(0))?;
    if ahead > 0 && free > 0 {
        ahead -= drop_dead_heads(conn, key, my_ticket)?;
    }

    if free > ahead {
        let position = lowest_free(conn, key, held)?;
        let token: i64 = conn
            .prepare_cached(
                "UPDATE semaphore_store SET last_token = MAX(last_token, ?1) + 1 WHERE id = 1 RETURNING last_token",
            )?
            .query_row([i64::try_from(floor).unwrap_or(i64::MAX)], |r| r.get(0))?;
        let expires_at = plus(now, request.ttl());
        conn.prepare_cached(
            "INSERT INTO semaphore_leases (pool, position, lease, token, expires_at, owner, borrow_key)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?
        .execute(params![
            key,
            position,
            request.lease.as_uuid().as_bytes(),
            token,
            expires_at,
            request.owner.as_deref(),
            request.key.as_deref()
        ])?;
        if let Some(w) = &waiter {
            forget_waiter(conn, key, w)?;
        }
        let lease = Lease::new(
            request.lease,
            pool,
            position,
            token.unsigned_abs(),
            instant(expires_at),
        );
        return Ok(Some(TryBorrow::Granted { lease }));
    }

    if let Some(w) = &waiter {
        keep_place(conn, key, w, now, mine.map(|m| m.1))?;
    }
    Ok(Some(TryBorrow::Exhausted {
        next_expiry: next_expiry(conn, key, now)?,
    }))
}

/// R6: the lowest position below the count that no lease holds
/// (`lowest_free`), given that one is free and `held` leases are active
/// (expired rows were reaped).
///
/// Positions fill from the bottom, so they are most often dense: `0..held`,
/// which the largest position tells in one index lookup. Otherwise the
/// first gap in key order is the answer; the scan stops there.
fn lowest_free(conn: &Connection, key: &[u8], held: i64) -> rusqlite::Result<u32> {
    let highest: Option<i64> = conn
        .prepare_cached("SELECT MAX(position) FROM semaphore_leases WHERE pool = ?1")?
        .query_row([key], |r| r.get(0))?;
    if highest.is_none_or(|h| h + 1 == held) {
        return Ok(u32::try_from(held).unwrap_or(u32::MAX));
    }
    let mut positions = conn.prepare_cached(
        "SELECT position FROM semaphore_leases WHERE pool = ?1 ORDER BY position",
    )?;
    let mut rows = positions.query([key])?;
    let mut position = 0u32;
    while let Some(row) = rows.next()? {
        if row.get::<_, u32>(0)? != position {
            break;
        }
        position += 1;
    }
    Ok(position)
}

fn forget_waiter(conn: &Connection, pool: &[u8], waiter: &[u8; 16]) -> rusqlite::Result<()> {
    conn.prepare_cached("DELETE FROM semaphore_waiters WHERE pool = ?1 AND waiter = ?2")?
        .execute(params![pool, waiter])?;
    Ok(())
}

/// Drops the heads queued ahead of `ticket` whose process is gone (see
/// [`liveness`](crate::liveness)); how many it dropped.
fn drop_dead_heads(conn: &Connection, key: &[u8], ticket: i64) -> rusqlite::Result<i64> {
    let dead: Vec<Vec<u8>> = conn
        .prepare_cached(
            "SELECT waiter, pid, pid_ns FROM semaphore_waiters WHERE pool = ?1 AND ticket < ?2",
        )?
        .query_map(params![key, ticket], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get::<_, Option<String>>(2)?))
        })?
        .filter_map(|row| match row {
            Ok((w, pid, ns)) if liveness::is_gone(pid, ns.as_deref()) => Some(Ok(w)),
            Ok(_) => None,
            Err(e) => Some(Err(e)),
        })
        .collect::<rusqlite::Result<_>>()?;
    for w in &dead {
        conn.prepare_cached("DELETE FROM semaphore_waiters WHERE pool = ?1 AND waiter = ?2")?
            .execute(params![key, w])?;
    }
    Ok(dead.len() as i64)
}

/// A refused head joins the store's queue of `pool`, or refreshes its place
/// when less than half of `WAITER_TTL` is left of it (`alive_until`).
fn keep_place(
    conn: &Connection,
    key: &[u8],
    w: &[u8; 16],
    now: i64,
    alive_until: Option<i64>,
) -> rusqlite::Result<()> {
    let renewed = now + ms(WAITER_TTL);
    match alive_until {
        None => {
            conn.prepare_cached(
                "INSERT INTO semaphore_waiters (pool, waiter, ticket, alive_until, pid, pid_ns)
                 VALUES (?1, ?2, (SELECT COALESCE(MAX(ticket), 0) + 1 FROM semaphore_waiters WHERE pool = ?1), ?3, ?4, ?5)",
            )?
            .execute(params![key, w, renewed, liveness::me().pid, &liveness::me().namespace])?;
        }
        Some(alive) if alive - now < ms(WAITER_TTL) / 2 => {
            conn.prepare_cached(
                "UPDATE semaphore_waiters SET alive_until = ?3 WHERE pool = ?1 AND waiter = ?2",
            )?
            .execute(params![key, w, renewed])?;
        }
        Some(_) => {}
    }
    Ok(())
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

/// The active lease of `pool` borrowed with `borrow_key`, if any.
pub(crate) fn keyed(
    conn: &Connection,
    pool: PoolId,
    borrow_key: Option<&str>,
    now: i64,
) -> rusqlite::Result<Option<Lease>> {
    let Some(borrow_key) = borrow_key else {
        return Ok(None);
    };
    conn.prepare_cached(
        "SELECT lease, position, token, expires_at FROM semaphore_leases
         WHERE pool = ?1 AND borrow_key = ?2 AND expires_at > ?3",
    )?
    .query_row(params![pool.as_uuid().as_bytes(), borrow_key, now], |r| {
        lease_from_row(r, pool)
    })
    .optional()
}

/// A lease from columns `lease, position, token, expires_at`.
fn lease_from_row(r: &rusqlite::Row<'_>, pool: PoolId) -> rusqlite::Result<Lease> {
    let id: [u8; 16] = r.get(0)?;
    let token: i64 = r.get(2)?;
    let expires_at: i64 = r.get(3)?;
    Ok(Lease::new(
        LeaseId::from_uuid(uuid::Uuid::from_bytes(id)),
        pool,
        r.get(1)?,
        token.unsigned_abs(),
        instant(expires_at),
    ))
}

/// A holder from columns `lease, position, token, expires_at, owner,
/// borrow_key`.
fn holder_from_row(r: &rusqlite::Row<'_>, pool: PoolId) -> rusqlite::Result<Holder> {
    Ok(Holder::new(lease_from_row(r, pool)?, r.get(4)?, r.get(5)?))
}

/// All or nothing over several pools: grants every request as
/// [`try_borrow`] would, or none; `Err(pool)` names a pool that does not
/// exist. Refused heads keep their place in the pools that refused them.
pub(crate) fn try_borrow_all(
    conn: &Connection,
    requests: &[BorrowRequest],
    floor: u64,
    now: i64,
) -> rusqlite::Result<Result<TryBorrowAll, PoolId>> {
    // Grants are made one pool at a time and undone whole if any pool
    // refuses; `Err(Ok(..))` carries a refusal out of the savepoint.
    let attempt = in_savepoint(conn, |conn| {
        let mut leases = Vec::with_capacity(requests.len());
        let mut blocked = Vec::new();
        for request in requests {
            match try_borrow(conn, request, floor, now)? {
                Some(TryBorrow::Granted { lease }) => leases.push(lease),
                Some(TryBorrow::Exhausted { next_expiry }) => blocked.push((request, next_expiry)),
                None => return Err(Refused::Missing(request.pool)),
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
        Err(Refused::Missing(pool)) => return Ok(Err(pool)),
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
            keep_place(conn, key, &w, now, alive)?;
        }
    }
    let next_expiry = if blocked.iter().any(|(_, at)| at.is_none()) {
        None
    } else {
        blocked.into_iter().filter_map(|(_, at)| at).max()
    };
    Ok(Ok(TryBorrowAll::Exhausted { next_expiry }))
}

/// Why a multi-pool borrow undid its grants.
enum Refused<'a> {
    Blocked(Vec<(&'a BorrowRequest, Option<std::time::SystemTime>)>),
    Missing(PoolId),
    Sql(rusqlite::Error),
}

impl From<rusqlite::Error> for Refused<'_> {
    fn from(e: rusqlite::Error) -> Self {
        Refused::Sql(e)
    }
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
    conn.prepare_cached(
        "UPDATE semaphore_leases SET expires_at = ?4
         WHERE lease = ?1 AND pool = ?2 AND expires_at > ?3
         RETURNING lease, position, token, expires_at",
    )?
    .query_row(
        params![
            lease.as_uuid().as_bytes(),
            pool.as_uuid().as_bytes(),
            now,
            expires_at
        ],
        |r| lease_from_row(r, pool),
    )
    .optional()
    .map(Some)
}

/// The active leases of `pool` by position; `None` if it does not exist.
pub(crate) fn holders(
    conn: &Connection,
    pool: PoolId,
    now: i64,
) -> rusqlite::Result<Option<Vec<Holder>>> {
    if count_of(conn, &pool)?.is_none() {
        return Ok(None);
    }
    conn.prepare_cached(
        "SELECT lease, position, token, expires_at, owner, borrow_key FROM semaphore_leases
         WHERE pool = ?1 AND expires_at > ?2 ORDER BY position",
    )?
    .query_map(params![pool.as_uuid().as_bytes(), now], |r| {
        holder_from_row(r, pool)
    })?
    .collect::<rusqlite::Result<_>>()
    .map(Some)
}

/// Ends the active lease at `position`; `None` if the pool does not exist,
/// `Some(None)` if no active lease holds the position.
pub(crate) fn force_return(
    conn: &Connection,
    pool: PoolId,
    position: u32,
    now: i64,
) -> rusqlite::Result<Option<Option<Holder>>> {
    if count_of(conn, &pool)?.is_none() {
        return Ok(None);
    }
    conn.prepare_cached(
        "DELETE FROM semaphore_leases WHERE pool = ?1 AND position = ?2 AND expires_at > ?3
         RETURNING lease, position, token, expires_at, owner, borrow_key",
    )?
    .query_row(params![pool.as_uuid().as_bytes(), position, now], |r| {
        holder_from_row(r, pool)
    })
    .optional()
    .map(Some)
}

/// The number of queued heads of `pool` alive at `now`: one per store
/// handle (normally one per process) with borrowers waiting.
pub(crate) fn queue_heads(conn: &Connection, pool: PoolId, now: i64) -> rusqlite::Result<u32> {
    conn.prepare_cached(
        "SELECT COUNT(*) FROM semaphore_waiters WHERE pool = ?1 AND alive_until > ?2",
    )?
    .query_row(params![pool.as_uuid().as_bytes(), now], |r| r.get(0))
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;
    use crate::schema;

    fn db() -> Connection {
        let mut conn = Connection::open_in_memory().unwrap();
        let found = schema::inspect(&conn).unwrap();
        schema::prepare(&mut conn, found).unwrap();
        conn
    }

    fn request(at_ms: u64, waiter: Option<WaiterId>) -> BorrowRequest {
        let now = UNIX_EPOCH + Duration::from_millis(at_ms);
        let mut r = BorrowRequest::new(
            PoolId::from_name("p"),
            LeaseId::new(),
            now,
            now + Duration::from_secs(60),
        );
        r.waiter = waiter;
        r
    }

    /// `try_borrow` deciding at the request's own instant.
    fn borrow(conn: &Connection, r: &BorrowRequest) -> Option<TryBorrow> {
        try_borrow(conn, r, 0, crate::time::ms(r.now)).unwrap()
    }

    fn position(answer: Option<TryBorrow>) -> Option<u32> {
        match answer {
            Some(TryBorrow::Granted { lease, .. }) => Some(lease.position),
            _ => None,
        }
    }

    /// The first-gap query agrees with the reference `lowest_free` over a
    /// deterministic walk of grants and returns, with count lowered and
    /// raised on the way.
    #[test]
    fn lowest_free_position_agrees_with_the_reference() {
        let conn = db();
        let pool = PoolId::from_name("p");
        let mut count = 8;
        register(&conn, pool, count, 0).unwrap();
        let mut held: Vec<(LeaseId, u32)> = Vec::new();
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for step in 0..2_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match x % 7 {
                0 | 1 if !held.is_empty() => {
                    let (id, _) = held.swap_remove((x as usize / 7) % held.len());
                    assert!(return_lease(&conn, pool, id, 1).unwrap());
                }
                2 if step % 50 == 0 => {
                    count = 1 + (x % 12) as u32;
                    register(&conn, pool, count, 1).unwrap();
                }
                _ => {
                    let in_use = held.len() as u32;
                    let expected = (in_use < count)
                        .then(|| semaphore_core::lowest_free(count, held.iter().map(|h| h.1)))
                        .flatten();
                    let r = request(1, None);
                    let got = position(borrow(&conn, &r));
                    assert_eq!(got, expected, "step {step}: count {count}, held {held:?}");
                    if let Some(p) = got {
                        held.push((r.lease, p));
                    }
                }
            }
        }
    }

    fn granted(answer: Option<TryBorrow>) -> bool {
        matches!(answer, Some(TryBorrow::Granted { .. }))
    }

    #[test]
    fn a_free_slot_goes_to_the_queued_head_not_to_a_newcomer() {
        let conn = db();
        let pool = PoolId::from_name("p");
        register(&conn, pool, 1, 0).unwrap();
        let first = request(0, None);
        assert!(granted(borrow(&conn, &first)));

        let head = WaiterId::new();
        assert!(
            !granted(borrow(&conn, &request(1, Some(head)))),
            "pool is full"
        );
        assert!(return_lease(&conn, pool, first.lease, 2).unwrap());

        assert!(
            !granted(borrow(&conn, &request(3, None))),
            "a newcomer jumped the queue"
        );
        assert!(
            !granted(borrow(&conn, &request(3, Some(WaiterId::new())))),
            "a later head jumped the queue"
        );
        assert!(granted(borrow(&conn, &request(4, Some(head)))));
        let left: i64 = conn
            .query_row("SELECT COUNT(*) FROM semaphore_waiters", [], |r| r.get(0))
            .unwrap();
        assert_eq!(
            left, 1,
            "the granted head's row is gone, the later head's stays"
        );
    }

    #[test]
    fn a_head_that_stops_asking_is_dropped_after_waiter_ttl() {
        let conn = db();
        let pool = PoolId::from_name("p");
        register(&conn, pool, 1, 0).unwrap();
        let first = request(0, None);
        assert!(granted(borrow(&conn, &first)));
        assert!(!granted(borrow(&conn, &request(1, Some(WaiterId::new())))));
        assert!(return_lease(&conn, pool, first.lease, 2).unwrap());

        let ttl = WAITER_TTL.as_millis() as u64;
        assert!(
            !granted(borrow(&conn, &request(ttl, None))),
            "the head is still alive"
        );
        assert!(
            granted(borrow(&conn, &request(ttl + 1, None))),
            "a dead head blocks no one"
        );
    }

    #[test]
    fn an_exhausted_attempt_writes_nothing_once_queued() {
        let conn = db();
        let pool = PoolId::from_name("p");
        register(&conn, pool, 1, 0).unwrap();
        assert!(granted(borrow(&conn, &request(0, None))));
        let head = WaiterId::new();
        let _ = borrow(&conn, &request(1, Some(head)));
        let before = conn.total_changes();
        let _ = borrow(&conn, &request(2, Some(head)));
        let _ = borrow(&conn, &request(3, None));
        assert_eq!(conn.total_changes(), before, "a re-check wrote to the file");
    }
}
