//! The borrow primitives, one pool or several at once: each grant is one
//! call of the store's borrow step, `borrow.sql`, the one place the borrow
//! is written.

use mysql_async::Transaction;
use mysql_async::prelude::Queryable;
use semaphore_core::store::{
    BorrowRequest, MAX_UNIX_MS, PlaceStep, TryBorrow, TryBorrowAll, WAITER_TTL_MS, key_name,
    millis, place_step,
};
use semaphore_core::{Error, Lease, LeaseId, Positions, SessionId};

use super::{SessionEnded, Sql, Step, instant, key};

/// What the borrow procedures answer: status, lease id, token, expiry,
/// positions (comma-separated), the earliest end of an active lease, and
/// the lease's session.
type Answer = (
    i64,
    Option<Vec<u8>>,
    Option<i64>,
    Option<i64>,
    Option<String>,
    Option<i64>,
    Option<Vec<u8>>,
);

impl Step<'_> {
    /// Grants the request's slots, the lowest
    /// free, if they are free for this borrower beyond those owed to the
    /// heads queued ahead of it (each owed its own weight); else keeps the
    /// borrower's place and says when the earliest lease expires. A keyed
    /// request whose lease is active gets it as is. One call of the borrow
    /// procedure in a transaction of its own: one round trip. Safe to
    /// repeat: a call whose answer was lost, repeated with the same lease
    /// id, gets the lease it granted.
    pub(crate) async fn call_borrow(
        &self,
        conn: &mut mysql_async::Conn,
        request: &BorrowRequest,
    ) -> Sql<Result<TryBorrow, Error>> {
        let answer: Option<Answer> = conn
            .exec_first(
                format!(
                    "CALL {}(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    self.t.borrow
                ),
                self.arguments(request),
            )
            .await?;
        answered(request, answer)
    }

    /// [`call_borrow`](Self::call_borrow) inside `tx`, the new lease's
    /// token above `above` too: the leases of one multi-pool borrow get
    /// rising tokens in the request's order, as if from one counter.
    async fn borrow_in(
        &self,
        tx: &mut Transaction<'_>,
        request: &BorrowRequest,
        above: i64,
    ) -> Sql<Result<TryBorrow, Error>> {
        let mut arguments = self.arguments(request);
        arguments.push(above.into());
        let answer: Option<Answer> = tx
            .exec_first(
                format!(
                    "CALL {}(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    self.t.borrow_in
                ),
                arguments,
            )
            .await?;
        answered(request, answer)
    }

    /// The procedures' arguments for `request`, but `p_above`.
    fn arguments(&self, request: &BorrowRequest) -> Vec<mysql_async::Value> {
        let bytes = |b: &[u8]| mysql_async::Value::from(b.to_vec());
        let text = |t: Option<&str>| t.map(|t| t.as_bytes().to_vec()).into();
        vec![
            bytes(key(&request.pool).as_slice()),
            bytes(request.lease.as_uuid().as_bytes()),
            millis(request.ttl).into(),
            i64::try_from(MAX_UNIX_MS).unwrap_or(i64::MAX).into(),
            request.slots.max(1).into(),
            request
                .session
                .map(|s| s.as_uuid().as_bytes().to_vec())
                .into(),
            request
                .waiter
                .map(|w| w.as_uuid().as_bytes().to_vec())
                .into(),
            text(request.owner.as_deref()),
            text(request.key.as_deref()),
            text(request.key.as_deref().map(key_name)),
            self.now_param().into(),
            WAITER_TTL_MS.into(),
            request.hold.map(millis).into(),
            self.link.map(|h| h.as_bytes().to_vec()).into(),
        ]
    }

    /// A refused head of a multi-pool borrow joins the queue of
    /// `request.pool`, or refreshes its place (see
    /// [`place_step`](semaphore_core::store::place_step)).
    async fn keep_place(
        &self,
        tx: &mut Transaction<'_>,
        request: &BorrowRequest,
        waiter: &[u8],
        now: i64,
    ) -> Sql<()> {
        let pool = key(&request.pool);
        let alive: Option<i64> = tx
            .exec_first(
                format!(
                    "SELECT alive_until FROM {} WHERE pool = ? AND waiter = ?",
                    self.t.waiters
                ),
                (pool.clone(), waiter.to_vec()),
            )
            .await?;
        match place_step(now, alive, request.hold) {
            PlaceStep::Join { alive_until } => {
                // A held place is bound to no process; any other to this
                // store's connection.
                let holder = self
                    .link
                    .filter(|_| request.hold.is_none())
                    .map(|h| h.as_bytes().to_vec());
                tx.exec_drop(
                    format!(
                        "INSERT INTO {} (pool, waiter, alive_until, slots, holder, since) \
                         VALUES (?, ?, ?, ?, ?, ?)",
                        self.t.waiters
                    ),
                    (
                        pool,
                        waiter.to_vec(),
                        alive_until,
                        request.slots,
                        holder,
                        now,
                    ),
                )
                .await
            }
            PlaceStep::Refresh { alive_until } => {
                tx.exec_drop(
                    format!(
                        "UPDATE {} SET alive_until = ? WHERE pool = ? AND waiter = ?",
                        self.t.waiters
                    ),
                    (alive_until, pool, waiter.to_vec()),
                )
                .await
            }
            PlaceStep::Keep => Ok(()),
        }
    }

    /// All or nothing over several pools, their rows locked in id order:
    /// grants every request as [`call_borrow`](Self::call_borrow) would,
    /// or none (a savepoint undoes the grants made); refused heads keep
    /// their place in the pools that refused them.
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
            match self.borrow_in(tx, request, above).await? {
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
                self.keep_place(tx, request, &w, now).await?;
            }
        }
        Ok(Ok(TryBorrowAll::refused(
            blocked.into_iter().map(|(_, at)| at),
        )))
    }
}

/// The borrow procedures' answer to `request` as a step's result.
fn answered(request: &BorrowRequest, answer: Option<Answer>) -> Sql<Result<TryBorrow, Error>> {
    let pool = request.pool;
    let Some((status, lease, token, expires_at, positions, next, session)) = answer else {
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
            let (Some(positions), Some(lease)) = (
                Positions::new(positions),
                lease.and_then(|l| uuid::Uuid::from_slice(&l).ok()),
            ) else {
                return Err(mysql_async::Error::Other(
                    "the borrow procedure granted no position or no lease".into(),
                ));
            };
            let session = session
                .and_then(|s| uuid::Uuid::from_slice(&s).ok())
                .map(SessionId::from_uuid);
            Ok(TryBorrow::Granted {
                lease: Lease::holding(
                    LeaseId::from_uuid(lease),
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
        4 => Err(Error::KeyReused { pool }),
        5 => Err(Error::Storage {
            operation: "borrow",
            retryable: true,
            source: Box::new(SessionEnded),
        }),
        _ => Err(Error::PoolNotFound { pool }),
    })
}
