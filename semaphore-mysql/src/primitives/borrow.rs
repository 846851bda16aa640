//! The borrow primitives: one pool (as one call of the borrow procedure,
//! or statement by statement for a keyed request) and several pools at
//! once (R5, R6, R10, R11, R15, R16).

use mysql_async::Transaction;
use mysql_async::prelude::Queryable;
use semaphore_core::store::{BorrowRequest, TryBorrow, TryBorrowAll};
use semaphore_core::{Error, Lease, PoolId, Positions};

use super::keyed::Keyed;
use super::{SessionEnded, Sql, Step, WAITER_GONE, instant, key, plus};
use crate::leases::holders_of;
use crate::options::WAITER_TTL_MS;

impl Step<'_> {
    /// R5, R6, R10, R11, R15, R16: grants the request's slots, the lowest
    /// free, if they are free for this borrower beyond those owed to the
    /// heads queued ahead of it (each owed its own weight); else keeps the
    /// borrower's place and says when the earliest lease expires. The
    /// inner error is `PoolNotFound` or `Draining`. A keyed request whose
    /// lease is active gets it as is.
    pub(crate) async fn try_borrow(
        &self,
        tx: &mut Transaction<'_>,
        request: &BorrowRequest,
    ) -> Sql<Result<TryBorrow, Error>> {
        self.try_borrow_above(tx, request, 0).await
    }

    /// [`try_borrow`](Self::try_borrow) whose new lease, if any, gets a
    /// token above `above` as well: the leases of one multi-pool borrow
    /// get rising tokens in the request's order, as if from one counter.
    async fn try_borrow_above(
        &self,
        tx: &mut Transaction<'_>,
        request: &BorrowRequest,
        above: i64,
    ) -> Sql<Result<TryBorrow, Error>> {
        let pool = request.pool;
        let Some((count, draining, now)) = self.lock_pool(tx, &pool).await? else {
            return Ok(Err(Error::PoolNotFound { pool }));
        };
        if draining {
            return Ok(Err(Error::Draining { pool }));
        }
        let t = self.t;
        // One look at the pool's rows: how many, how many expired, and the
        // highest position (for the lowest free ones); the expired are
        // deleted only if there are any.
        let (rows, expired, mut highest): (i64, i64, Option<i64>) = tx
            .exec_first(
                format!(
                    "SELECT COUNT(*), CAST(COALESCE(SUM(expires_at <= ?), 0) AS SIGNED), \
                     MAX(position) FROM {} WHERE pool = ?",
                    t.leases
                ),
                (now, key(&pool)),
            )
            .await?
            .unwrap_or_default();
        if expired > 0 {
            tx.exec_drop(
                format!(
                    "DELETE FROM {} WHERE pool = ? AND expires_at <= ?",
                    t.leases
                ),
                (key(&pool), now),
            )
            .await?;
            highest = self.highest(tx, &pool).await?;
        }
        let waiter = request.waiter.map(|w| w.as_uuid().as_bytes().to_vec());
        // Lost replies: a retry under the same lease id gets what it was
        // granted, if that is still active.
        let id = request.lease.as_uuid().as_bytes().to_vec();
        if request.retried
            && let Some(lease) = holders_of(self.rows_of(tx, &pool, &id, now).await?, pool)
                .pop()
                .map(|h| h.lease)
        {
            if let Some(w) = &waiter {
                self.leave_queue(tx, pool, w).await?;
            }
            return Ok(Ok(TryBorrow::Granted { lease }));
        }
        match self.keyed(tx, &pool, request.key.as_deref(), now).await? {
            Keyed::Same(lease) => {
                if let Some(w) = &waiter {
                    self.leave_queue(tx, pool, w).await?;
                }
                return Ok(Ok(TryBorrow::Granted { lease }));
            }
            Keyed::Reused => return Ok(Err(Error::KeyReused { pool })),
            Keyed::No => {}
        }
        let mut held = rows - expired;
        // The queued heads, in one look: those not seen for too long are
        // dropped; the borrower's own place; the slots owed ahead of it.
        // A place whose process's connection is gone counts as lapsed
        // (R16, amended: a killed waiter holds back no one).
        let queued: Vec<(Vec<u8>, i64, i64, u32)> = tx
            .exec(
                format!(
                    "SELECT waiter, ticket, IF({WAITER_GONE}, 0, alive_until), slots FROM {} \
                     WHERE pool = ?",
                    t.waiters
                ),
                (key(&pool),),
            )
            .await?;
        if queued.iter().any(|q| q.2 <= now) {
            tx.exec_drop(
                format!(
                    "DELETE FROM {} WHERE pool = ? AND (alive_until <= ? OR {WAITER_GONE})",
                    t.waiters
                ),
                (key(&pool), now),
            )
            .await?;
        }
        let alive = || queued.iter().filter(|q| q.2 > now);
        let mine: Option<(i64, i64)> = waiter
            .as_ref()
            .and_then(|w| alive().find(|q| &q.0 == w).map(|q| (q.1, q.2)));
        let my_ticket = mine.map_or(i64::MAX, |m| m.0);
        // R15, amended: a place whose weight is over the count keeps its
        // turn but is owed nothing while the count is below it.
        let ahead: i64 = alive()
            .filter(|q| q.1 < my_ticket && q.3 <= count)
            .map(|q| i64::from(q.3))
            .sum();
        let n = i64::from(request.slots.max(1));
        if i64::from(count) - held - ahead < n {
            let freed = self.reap_gone(tx, &pool, now).await?;
            if freed > 0 {
                held -= freed;
                highest = self.highest(tx, &pool).await?;
            }
        }
        let free = i64::from(count).saturating_sub(held);
        if free - ahead < n {
            if let Some(w) = &waiter {
                self.keep_place(tx, &pool, w, request, now, mine.map(|m| m.1))
                    .await?;
            }
            // The earliest end of an active lease: its expiry, or its
            // session's end (R16, amended).
            let next: Option<i64> = tx
                .exec_first::<Option<i64>, _, _>(
                    format!(
                        "SELECT MIN(IF(holder IS NULL, expires_at, LEAST(expires_at, \
                         (SELECT x.expires_at FROM {} x WHERE x.id = holder)))) \
                         FROM {} WHERE pool = ? AND expires_at > ? AND NOT {}",
                        t.sessions,
                        t.leases,
                        t.gone_at("?")
                    ),
                    (key(&pool), now, now),
                )
                .await?
                .flatten();
            return Ok(Ok(TryBorrow::Exhausted {
                next_expiry: next.map(instant),
            }));
        }
        // R16, amended: no lease is born dead.
        let session = request.session.map(|s| s.as_uuid().as_bytes().to_vec());
        if let Some(session) = &session {
            let alive: Option<i64> = tx
                .exec_first(
                    format!(
                        "SELECT COUNT(*) FROM {} WHERE id = ? AND expires_at > ?",
                        t.sessions
                    ),
                    (session.clone(), now),
                )
                .await?;
            if alive.unwrap_or_default() == 0 {
                return Ok(Err(Error::Storage {
                    operation: "borrow",
                    retryable: true,
                    source: Box::new(SessionEnded),
                }));
            }
        }
        let positions = self
            .lowest_free(tx, &pool, held, highest, request.slots.max(1))
            .await?;
        // R9: above the pool's last token and the store's floor (which a
        // delete of the pool raises to it).
        tx.exec_drop(
            format!(
                "UPDATE {} SET last_token = LAST_INSERT_ID(GREATEST(last_token, \
                 (SELECT s.last_token FROM {} s WHERE s.id = 1), ?) + 1) WHERE pool = ?",
                t.pools, t.store
            ),
            (above, key(&pool)),
        )
        .await?;
        let token = tx.last_insert_id().unwrap_or_default();
        let expires_at = plus(now, request.ttl);
        for (i, position) in positions.iter().enumerate() {
            // The labels go on the lowest position's row only.
            let (owner, borrow_key) = match i {
                0 => (
                    request.owner.as_deref().map(|o| o.as_bytes().to_vec()),
                    request.key.as_deref().map(|k| k.as_bytes().to_vec()),
                ),
                _ => (None, None),
            };
            tx.exec_drop(
                format!(
                    "INSERT INTO {} (pool, position, lease, token, expires_at, owner, \
                     borrow_key, holder) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    t.leases
                ),
                (
                    key(&pool),
                    position,
                    id.clone(),
                    token,
                    expires_at,
                    owner,
                    borrow_key,
                    session.clone(),
                ),
            )
            .await?;
        }
        if let Some(w) = &waiter {
            self.leave_queue(tx, pool, w).await?;
        }
        Ok(Ok(TryBorrow::Granted {
            lease: Lease::holding(request.lease, pool, positions, token, instant(expires_at))
                .with_session(request.session),
        }))
    }

    /// [`try_borrow`](Self::try_borrow) for a request without a key, as one
    /// call of the borrow procedure in autocommit: one round trip. Safe to
    /// repeat: a call whose answer was lost, repeated with the same lease
    /// id, gets the lease it granted.
    pub(crate) async fn call_borrow(
        &self,
        conn: &mut mysql_async::Conn,
        request: &BorrowRequest,
    ) -> Sql<Result<TryBorrow, Error>> {
        let pool = request.pool;
        let ttl = i64::try_from(request.ttl.as_millis()).unwrap_or(i64::MAX);
        let max = i64::try_from(semaphore_core::store::MAX_UNIX_MS).unwrap_or(i64::MAX);
        type Answer = (
            i64,
            Option<i64>,
            Option<i64>,
            Option<String>,
            Option<i64>,
            Option<Vec<u8>>,
        );
        let answer: Option<Answer> = conn
            .exec_first(
                format!("CALL {}(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", self.t.borrow),
                (
                    key(&pool),
                    request.lease.as_uuid().as_bytes().to_vec(),
                    ttl,
                    max,
                    request.slots.max(1),
                    request.session.map(|s| s.as_uuid().as_bytes().to_vec()),
                    request.waiter.map(|w| w.as_uuid().as_bytes().to_vec()),
                    request.owner.as_deref().map(|o| o.as_bytes().to_vec()),
                    self.now_param(),
                    WAITER_TTL_MS,
                    self.holder.map(|h| h.as_bytes().to_vec()),
                ),
            )
            .await?;
        let Some((status, token, expires_at, positions, next, session)) = answer else {
            return Err(mysql_async::Error::Other(
                "the borrow procedure answered no row".into(),
            ));
        };
        Ok(match status {
            0 => {
                let positions: Vec<u32> = positions
                    .unwrap_or_default()
                    .split(',')
                    .filter_map(|p| p.parse().ok())
                    .collect();
                let Some(positions) = Positions::new(positions) else {
                    return Err(mysql_async::Error::Other(
                        "the borrow procedure granted no position".into(),
                    ));
                };
                let session = session
                    .and_then(|s| uuid::Uuid::from_slice(&s).ok())
                    .map(semaphore_core::SessionId::from_uuid);
                Ok(TryBorrow::Granted {
                    lease: Lease::holding(
                        request.lease,
                        pool,
                        positions,
                        token.unwrap_or_default().unsigned_abs(),
                        instant(expires_at.unwrap_or_default()),
                    )
                    .with_session(session),
                })
            }
            1 => Ok(TryBorrow::Exhausted {
                next_expiry: next.map(instant),
            }),
            3 => Err(Error::Draining { pool }),
            5 => Err(Error::Storage {
                operation: "borrow",
                retryable: true,
                source: Box::new(SessionEnded),
            }),
            _ => Err(Error::PoolNotFound { pool }),
        })
    }

    /// A refused head of `request.slots` joins the queue of `pool`, or
    /// refreshes its place when less than half of its life is left; a held
    /// place (`request.hold`) lives `hold` after every attempt.
    async fn keep_place(
        &self,
        tx: &mut Transaction<'_>,
        pool: &PoolId,
        waiter: &[u8],
        request: &BorrowRequest,
        now: i64,
        alive_until: Option<i64>,
    ) -> Sql<()> {
        let slots = request.slots;
        let held = request
            .hold
            .map(|h| i64::try_from(h.as_millis()).unwrap_or(i64::MAX));
        let renewed = now.saturating_add(held.unwrap_or(WAITER_TTL_MS));
        match alive_until {
            None => {
                // A held place is bound to no process; any other to this
                // store's connection.
                let holder = self
                    .holder
                    .filter(|_| held.is_none())
                    .map(|h| h.as_bytes().to_vec());
                tx.exec_drop(
                    format!(
                        "INSERT INTO {} (pool, waiter, alive_until, slots, holder) \
                         VALUES (?, ?, ?, ?, ?)",
                        self.t.waiters
                    ),
                    (key(pool), waiter.to_vec(), renewed, slots, holder),
                )
                .await
            }
            Some(alive) if held.is_some() || alive - now < WAITER_TTL_MS / 2 => {
                tx.exec_drop(
                    format!(
                        "UPDATE {} SET alive_until = ? WHERE pool = ? AND waiter = ?",
                        self.t.waiters
                    ),
                    (renewed, key(pool), waiter.to_vec()),
                )
                .await
            }
            Some(_) => Ok(()),
        }
    }

    /// The highest position held in `pool`, `None` if none is.
    async fn highest(&self, tx: &mut Transaction<'_>, pool: &PoolId) -> Sql<Option<i64>> {
        Ok(tx
            .exec_first::<Option<i64>, _, _>(
                format!("SELECT MAX(position) FROM {} WHERE pool = ?", self.t.leases),
                (key(pool),),
            )
            .await?
            .flatten())
    }

    /// R6, R15: the `n` lowest positions no lease holds, given that `held`
    /// slots are held (expired rows were reaped), the highest of them at
    /// `highest`, and `n` are free.
    ///
    /// Positions fill from the bottom, so they are most often dense,
    /// `0..held`, and the answer is `held..held + n`; otherwise the gaps in
    /// position order come first.
    async fn lowest_free(
        &self,
        tx: &mut Transaction<'_>,
        pool: &PoolId,
        held: i64,
        highest: Option<i64>,
        n: u32,
    ) -> Sql<Positions> {
        let mut free = Vec::with_capacity(n as usize);
        let mut next = 0u32;
        if highest.is_none_or(|h| h + 1 == held) {
            next = u32::try_from(held).unwrap_or(u32::MAX);
        } else {
            let taken: Vec<u32> = tx
                .exec(
                    format!(
                        "SELECT position FROM {} WHERE pool = ? ORDER BY position",
                        self.t.leases
                    ),
                    (key(pool),),
                )
                .await?;
            for taken in taken {
                if free.len() >= n as usize {
                    break;
                }
                free.extend((next..taken).take(n as usize - free.len()));
                next = taken.saturating_add(1);
            }
        }
        free.extend((next..).take(n as usize - free.len()));
        Ok(Positions::new(free).unwrap_or_else(|| Positions::one(next)))
    }

    /// All or nothing over several pools, their rows locked in id order:
    /// grants every request as [`try_borrow`](Self::try_borrow) would, or
    /// none (a savepoint undoes the grants made); refused heads keep their
    /// place in the pools that refused them.
    pub(crate) async fn try_borrow_all(
        &self,
        tx: &mut Transaction<'_>,
        requests: &[BorrowRequest],
    ) -> Sql<Result<TryBorrowAll, Error>> {
        let mut ids: Vec<Vec<u8>> = requests.iter().map(|r| key(&r.pool)).collect();
        ids.sort();
        ids.dedup();
        for id in &ids {
            tx.exec_drop(
                format!(
                    "SELECT pool FROM {} WHERE pool = ? FOR UPDATE",
                    self.t.pools
                ),
                (id.clone(),),
            )
            .await?;
        }
        tx.query_drop("SAVEPOINT semaphore_all").await?;
        let mut leases = Vec::with_capacity(requests.len());
        let mut blocked = Vec::new();
        let mut above = 0;
        for request in requests {
            match self.try_borrow_above(tx, request, above).await? {
                Ok(TryBorrow::Granted { lease }) => {
                    above = above.max(i64::try_from(lease.token).unwrap_or(i64::MAX));
                    leases.push(lease);
                }
                Ok(TryBorrow::Exhausted { next_expiry }) => blocked.push((request, next_expiry)),
                Err(e) => {
                    tx.query_drop("ROLLBACK TO SAVEPOINT semaphore_all").await?;
                    return Ok(Err(e));
                }
            }
        }
        if blocked.is_empty() {
            return Ok(Ok(TryBorrowAll::Granted { leases }));
        }
        tx.query_drop("ROLLBACK TO SAVEPOINT semaphore_all").await?;
        let now = self.now(tx).await?;
        for (request, _) in &blocked {
            if let Some(w) = request.waiter.map(|w| w.as_uuid().as_bytes().to_vec()) {
                let alive: Option<i64> = tx
                    .exec_first(
                        format!(
                            "SELECT alive_until FROM {} WHERE pool = ? AND waiter = ?",
                            self.t.waiters
                        ),
                        (key(&request.pool), w.clone()),
                    )
                    .await?;
                self.keep_place(tx, &request.pool, &w, request, now, alive)
                    .await?;
            }
        }
        Ok(Ok(TryBorrowAll::refused(
            blocked.into_iter().map(|(_, at)| at),
        )))
    }
}
