//! The store's primitives as statements in one InnoDB transaction each
//! (`READ COMMITTED`), the pool's row locked first (`FOR UPDATE`): steps on
//! one pool serialize on that row, steps on different pools do not (a
//! multi-pool borrow locks its pools' rows in id order).
//!
//! Times are integer unix milliseconds; `now` is read inside the step,
//! after the lock, from the server's clock (`SYSDATE(3)`, the time the
//! statement runs), or given by a test's manual clock.

use std::time::Duration;

use mysql_async::Transaction;
use mysql_async::prelude::Queryable;
use semaphore_core::store::{DecidingClock, from_unix_ms, saturating_add, truncate_ms, unix_ms};
use semaphore_core::{Holder, Lease, LeaseId, PoolId, PoolState};

use crate::leases::{LeaseRow, holders_of};
use crate::link::LinkId;
use crate::schema::Tables;

pub(crate) type Sql<T> = mysql_async::Result<T>;

/// The deciding instant, unix ms, as a statement computes it: the test's
/// (the first parameter), or the server's clock as the statement runs.
pub(crate) const NOW: &str = "COALESCE(?, CAST(UNIX_TIMESTAMP(SYSDATE(3)) * 1000 AS SIGNED))";

/// One step's context: its tables, its clock, and the named lock that
/// marks this store's queued heads alive.
pub(crate) struct Step<'a> {
    pub(crate) t: &'a Tables,
    pub(crate) time: &'a DecidingClock,
    pub(crate) link: Option<LinkId>,
}

/// The source of the error of a step that named a session that has ended:
/// nothing was granted; the store opens a new session.
#[derive(Debug)]
pub(crate) struct SessionEnded;

impl std::fmt::Display for SessionEnded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "the store's session had ended (the server lost it or it was deleted); \
             a new one is being opened",
        )
    }
}

impl std::error::Error for SessionEnded {}

pub(crate) fn key(pool: &PoolId) -> Vec<u8> {
    pool.as_uuid().as_bytes().to_vec()
}

pub(crate) fn instant(ms: i64) -> std::time::SystemTime {
    from_unix_ms(ms.max(0).unsigned_abs())
}

pub(crate) fn plus(now: i64, ttl: Duration) -> i64 {
    let at = saturating_add(instant(now), ttl);
    i64::try_from(unix_ms(truncate_ms(at))).unwrap_or(i64::MAX)
}

impl Step<'_> {
    /// The deciding instant, for a step that locked nothing.
    pub(crate) async fn now(&self, tx: &mut Transaction<'_>) -> Sql<i64> {
        let now: Option<i64> = tx
            .exec_first(format!("SELECT {NOW}"), (self.now_param(),))
            .await?;
        Ok(now.unwrap_or_default())
    }

    /// Locks the pool's row; its count, its drain flag and the deciding
    /// instant, read after the lock (`SYSDATE` runs as the row is read);
    /// `None` if the pool does not exist.
    pub(crate) async fn lock_pool(
        &self,
        tx: &mut Transaction<'_>,
        pool: &PoolId,
    ) -> Sql<Option<(u32, bool, i64)>> {
        tx.exec_first(
            format!(
                "SELECT count, draining, {NOW} FROM {} WHERE pool = ? FOR UPDATE",
                self.t.pools
            ),
            (self.now_param(), key(pool)),
        )
        .await
    }

    /// The test's now, or `NULL` for the server's (see [`NOW`]).
    pub(crate) fn now_param(&self) -> Option<i64> {
        self.time
            .now_param()
            .map(|ms| i64::try_from(ms).unwrap_or(i64::MAX))
    }

    /// Slots held at `now` by active leases, those of gone holders
    /// left out.
    async fn in_use(&self, tx: &mut Transaction<'_>, pool: &PoolId, now: i64) -> Sql<u32> {
        let n: Option<i64> = tx
            .exec_first(
                format!(
                    "SELECT COUNT(*) FROM {} WHERE pool = ? AND expires_at > ? AND NOT {}",
                    self.t.leases,
                    self.t.gone_at("?")
                ),
                (key(pool), now, now),
            )
            .await?;
        Ok(u32::try_from(n.unwrap_or_default()).unwrap_or(u32::MAX))
    }

    /// Creates the pool or sets its count.
    pub(crate) async fn register(
        &self,
        tx: &mut Transaction<'_>,
        pool: PoolId,
        count: u32,
    ) -> Sql<PoolState> {
        tx.exec_drop(
            format!(
                "INSERT INTO {} (pool, count) VALUES (?, ?) \
                 ON DUPLICATE KEY UPDATE count = VALUES(count)",
                self.t.pools
            ),
            (key(&pool), count),
        )
        .await?;
        Ok(self
            .inspect(tx, pool)
            .await?
            .unwrap_or_else(|| PoolState::new(pool, count, 0)))
    }

    /// The pool's state, or `None` if it does not exist.
    pub(crate) async fn inspect(
        &self,
        tx: &mut Transaction<'_>,
        pool: PoolId,
    ) -> Sql<Option<PoolState>> {
        let Some((count, draining, now)) = self.lock_pool(tx, &pool).await? else {
            return Ok(None);
        };
        let in_use = self.in_use(tx, &pool, now).await?;
        let queued: Option<i64> = tx
            .exec_first(
                format!(
                    "SELECT COUNT(*) FROM {} WHERE pool = ? AND alive_until > ?",
                    self.t.waiters
                ),
                (key(&pool), now),
            )
            .await?;
        Ok(Some(
            PoolState::new(pool, count, in_use)
                .with_draining(draining)
                .with_queued(u32::try_from(queued.unwrap_or_default()).unwrap_or(u32::MAX)),
        ))
    }

    /// The live places of the queue of `pool`, first served first; a
    /// place names a store's connection unless it is a held place. A place
    /// taken before version 4 has no `since`: now stands in.
    pub(crate) async fn queue(
        &self,
        tx: &mut Transaction<'_>,
        pool: PoolId,
    ) -> Sql<Vec<semaphore_core::QueuedPlace>> {
        let rows: Vec<(Vec<u8>, u32, i64, bool)> = tx
            .exec(
                format!(
                    "SELECT w.waiter, w.slots, COALESCE(w.since, t.now), w.holder IS NULL
                     FROM {} w JOIN (SELECT {NOW} AS now) t
                     WHERE w.pool = ? AND w.alive_until > t.now ORDER BY w.ticket",
                    self.t.waiters
                ),
                (self.now_param(), key(&pool)),
            )
            .await?;
        Ok(rows
            .into_iter()
            .filter_map(|(waiter, slots, since, held)| {
                let waiter = uuid::Uuid::from_slice(&waiter).ok()?;
                Some(semaphore_core::QueuedPlace::kept(
                    semaphore_core::WaiterId::from_uuid(waiter),
                    slots,
                    semaphore_core::store::from_unix_ms(u64::try_from(since).unwrap_or(0)),
                    held,
                ))
            })
            .collect())
    }

    /// Starts or ends the drain; the state, or `None` if the pool does not
    /// exist.
    pub(crate) async fn set_draining(
        &self,
        tx: &mut Transaction<'_>,
        pool: PoolId,
        draining: bool,
    ) -> Sql<Option<PoolState>> {
        tx.exec_drop(
            format!("UPDATE {} SET draining = ? WHERE pool = ?", self.t.pools),
            (draining, key(&pool)),
        )
        .await?;
        self.inspect(tx, pool).await
    }

    /// Removes the pool, its leases and its queued heads.
    pub(crate) async fn delete(&self, tx: &mut Transaction<'_>, pool: PoolId) -> Sql<bool> {
        if self.lock_pool(tx, &pool).await?.is_none() {
            return Ok(false);
        }
        // The store's floor keeps the pool's last token, for a pool of
        // this id registered again.
        tx.exec_drop(
            format!(
                "UPDATE {} s SET s.last_token = GREATEST(s.last_token, \
                 (SELECT p.last_token FROM {} p WHERE p.pool = ?)) WHERE s.id = 1",
                self.t.store, self.t.pools
            ),
            (key(&pool),),
        )
        .await?;
        for table in [&self.t.leases, &self.t.waiters, &self.t.pools] {
            tx.exec_drop(format!("DELETE FROM {table} WHERE pool = ?"), (key(&pool),))
                .await?;
        }
        Ok(true)
    }

    /// Ends an active lease; `false` for anything else: one call of the
    /// return procedure (`return.sql`) in autocommit, one round trip. A
    /// lease whose holder is gone is not active, and is not returned. It
    /// takes no lock on the pool: a borrow that runs beside it sees the
    /// slot taken or free, never both. Once its delete has committed, the
    /// call rings the heads of other processes the freed slots are owed
    /// to, by their links.
    pub(crate) async fn return_lease(
        &self,
        q: &mut mysql_async::Conn,
        pool: PoolId,
        lease: LeaseId,
    ) -> Sql<bool> {
        let freed: Option<i64> = q
            .exec_first(
                format!("CALL {}(?, ?, ?, ?)", self.t.return_lease),
                (
                    key(&pool),
                    lease.as_uuid().as_bytes().to_vec(),
                    self.now_param(),
                    self.link.map(|l| l.as_bytes().to_vec()),
                ),
            )
            .await?;
        Ok(freed.unwrap_or_default() > 0)
    }

    /// Unbinds an active lease from its session; whether it
    /// was active. One statement in autocommit.
    pub(crate) async fn unbind(
        &self,
        q: &mut mysql_async::Conn,
        pool: PoolId,
        lease: LeaseId,
    ) -> Sql<bool> {
        let update = format!("UPDATE {} SET holder = NULL", self.t.leases);
        self.on_active(q, &update, pool, lease).await?;
        // Matched rows, not changed ones: an unbound lease reports true.
        let matched = q
            .info()
            .split("Rows matched: ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok());
        Ok(matched.unwrap_or(q.affected_rows()) > 0)
    }

    /// Runs `change` (an `UPDATE` or `DELETE` of the leases table, up to
    /// its `WHERE`) on lease `lease` of `pool` if it is active: not expired
    /// by the server's clock, and its holder not gone. One statement; its
    /// affected rows (and info) are `q`'s.
    async fn on_active(
        &self,
        q: &mut mysql_async::Conn,
        change: &str,
        pool: PoolId,
        lease: LeaseId,
    ) -> Sql<()> {
        q.exec_drop(
            format!(
                "{change} WHERE pool = ? AND lease = ? AND expires_at > {NOW} AND NOT {}",
                self.t.gone_at(NOW)
            ),
            (
                key(&pool),
                lease.as_uuid().as_bytes().to_vec(),
                self.now_param(),
                self.now_param(),
            ),
        )
        .await
    }

    /// The rows of lease `id` of `pool` active at `now`, by position.
    pub(crate) async fn rows_of(
        &self,
        tx: &mut Transaction<'_>,
        pool: &PoolId,
        id: &[u8],
        now: i64,
    ) -> Sql<Vec<LeaseRow>> {
        tx.exec(
            format!(
                "SELECT lease, position, token, expires_at, owner, borrow_key, holder FROM {} \
                 WHERE pool = ? AND lease = ? AND expires_at > ? AND NOT {} ORDER BY position",
                self.t.leases,
                self.t.gone_at("?")
            ),
            (key(pool), id.to_vec(), now, now),
        )
        .await
    }

    /// Moves an active lease's expiry to `now + ttl`; `None` if the pool
    /// does not exist, `Some(None)` if the lease is not active.
    pub(crate) async fn renew(
        &self,
        tx: &mut Transaction<'_>,
        pool: PoolId,
        lease: LeaseId,
        ttl: Duration,
    ) -> Sql<Option<Option<Lease>>> {
        let Some((_, _, now)) = self.lock_pool(tx, &pool).await? else {
            return Ok(None);
        };
        let id = lease.as_uuid().as_bytes().to_vec();
        // A lease whose session ended is not active: it is not renewed.
        tx.exec_drop(
            format!(
                "UPDATE {} SET expires_at = ? \
                 WHERE pool = ? AND lease = ? AND expires_at > ? AND NOT {}",
                self.t.leases,
                self.t.gone_at("?")
            ),
            (plus(now, ttl), key(&pool), id.clone(), now, now),
        )
        .await?;
        let rows = self.rows_of(tx, &pool, &id, now).await?;
        Ok(Some(holders_of(rows, pool).pop().map(|h| h.lease)))
    }

    /// Ends the active lease holding `position` (all its slots);
    /// `None` if the pool does not exist, `Some(None)` if no active lease
    /// holds it.
    pub(crate) async fn force_return(
        &self,
        tx: &mut Transaction<'_>,
        pool: PoolId,
        position: u32,
    ) -> Sql<Option<Option<Holder>>> {
        let Some((_, _, now)) = self.lock_pool(tx, &pool).await? else {
            return Ok(None);
        };
        let id: Option<Vec<u8>> = tx
            .exec_first(
                format!(
                    "SELECT lease FROM {} WHERE pool = ? AND position = ? AND expires_at > ? \
                     AND NOT {}",
                    self.t.leases,
                    self.t.gone_at("?")
                ),
                (key(&pool), position, now, now),
            )
            .await?;
        let Some(id) = id else {
            return Ok(Some(None));
        };
        let rows = self.rows_of(tx, &pool, &id, now).await?;
        tx.exec_drop(
            format!("DELETE FROM {} WHERE pool = ? AND lease = ?", self.t.leases),
            (key(&pool), id),
        )
        .await?;
        Ok(Some(holders_of(rows, pool).pop()))
    }

    /// The active leases by position, those of gone holders left out;
    /// `None` if the pool does not exist.
    pub(crate) async fn holders(
        &self,
        tx: &mut Transaction<'_>,
        pool: PoolId,
    ) -> Sql<Option<Vec<Holder>>> {
        let Some((_, _, now)) = self.lock_pool(tx, &pool).await? else {
            return Ok(None);
        };
        let rows: Vec<LeaseRow> = tx
            .exec(
                format!(
                    "SELECT lease, position, token, expires_at, owner, borrow_key, holder FROM {} \
                     WHERE pool = ? AND expires_at > ? AND NOT {} ORDER BY position",
                    self.t.leases,
                    self.t.gone_at("?")
                ),
                (key(&pool), now, now),
            )
            .await?;
        Ok(Some(holders_of(rows, pool)))
    }

    /// The heads queued on `pool` whose place is alive.
    pub(crate) async fn queue_heads(&self, tx: &mut Transaction<'_>, pool: PoolId) -> Sql<u32> {
        let now = self.now(tx).await?;
        let n: Option<i64> = tx
            .exec_first(
                format!(
                    "SELECT COUNT(*) FROM {} WHERE pool = ? AND alive_until > ?",
                    self.t.waiters
                ),
                (key(&pool), now),
            )
            .await?;
        Ok(u32::try_from(n.unwrap_or_default()).unwrap_or(u32::MAX))
    }

    /// Forgets a queued head's place.
    /// The place of `waiter` in the queue of `pool`: 1 for the first live
    /// place; `None` if it has no live place.
    pub(crate) async fn place(
        &self,
        tx: &mut Transaction<'_>,
        pool: PoolId,
        waiter: &[u8],
    ) -> Sql<Option<u64>> {
        let found: Option<i64> = tx
            .exec_first(
                format!(
                    "SELECT COUNT(*) FROM {w} w JOIN {w} me ON me.pool = w.pool AND me.waiter = ?
                     JOIN (SELECT {NOW} AS now) t
                     WHERE w.pool = ? AND me.alive_until > t.now AND w.alive_until > t.now
                     AND w.ticket <= me.ticket",
                    w = self.t.waiters
                ),
                (waiter.to_vec(), self.now_param(), key(&pool)),
            )
            .await?;
        Ok(found.filter(|n| *n > 0).map(i64::unsigned_abs))
    }

    pub(crate) async fn leave_queue(
        &self,
        tx: &mut Transaction<'_>,
        pool: PoolId,
        waiter: &[u8],
    ) -> Sql<()> {
        tx.exec_drop(
            format!(
                "DELETE FROM {} WHERE pool = ? AND waiter = ?",
                self.t.waiters
            ),
            (key(&pool), waiter.to_vec()),
        )
        .await
    }
}

mod borrow;
mod list;
