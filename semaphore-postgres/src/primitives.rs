//! The [`Store`] primitives of [`PostgresStore`]: each one statement, one
//! round trip, calling the store's server-side function.

use std::time::Duration;

use semaphore_core::store::{
    BorrowRequest, Parts, Store, TryBorrow, TryBorrowAll, WaiterId, async_trait, millis,
};
use semaphore_core::{Error, Holder, Lease, LeaseId, PoolId, PoolState, Result};
use tokio_postgres::Row;
use tokio_postgres::types::{ToSql, Type};

use crate::PostgresStore;
use crate::error::storage;
use crate::sql::{self, Attempt};

pub(crate) fn first<'a>(rows: &'a [Row], operation: &'static str) -> Result<&'a Row> {
    rows.first().ok_or_else(|| Error::Storage {
        operation,
        retryable: false,
        source: format!("{operation} returned no row").into(),
    })
}

/// A pool's state from columns `count, in_use, draining, queued`.
fn state(pool: PoolId, row: &Row, operation: &'static str) -> Result<PoolState> {
    let count: i64 = row.try_get(0).map_err(storage(operation))?;
    let in_use: i64 = row.try_get(1).map_err(storage(operation))?;
    let draining: bool = row.try_get(2).map_err(storage(operation))?;
    let queued: i64 = row.try_get(3).map_err(storage(operation))?;
    Ok(PoolState::new(
        pool,
        u32::try_from(count).unwrap_or(u32::MAX),
        u32::try_from(in_use).unwrap_or(u32::MAX),
    )
    .with_draining(draining)
    .with_queued(u32::try_from(queued).unwrap_or(u32::MAX)))
}

#[async_trait]
impl Store for PostgresStore {
    fn parts(&self) -> Parts<'_> {
        Parts {
            clock: self.time.clock(),
            changes: &self.changes,
            session: Some(&self.session),
            max_ttl: Duration::MAX,
            in_place: None,
        }
    }

    /// 1 s: a slot handed to another process's head lasts at most that
    /// until the head takes it.
    fn handed_bound(&self) -> Option<std::time::Duration> {
        Some(std::time::Duration::from_millis(
            crate::schema::HANDED_BOUND_MS,
        ))
    }

    async fn register(&self, pool: PoolId, count: u32) -> Result<PoolState> {
        let (now, count) = (self.now_param(), i64::from(count));
        let rows = self
            .query(
                "register",
                &self.sql.register,
                &[
                    (&pool.as_uuid(), Type::UUID),
                    (&count, Type::INT8),
                    (&now, Type::INT8),
                ],
            )
            .await?;
        let row = first(&rows, "register")?;
        state(pool, row, "register")
    }

    async fn inspect(&self, pool: PoolId) -> Result<PoolState> {
        let now = self.now_param();
        let rows = self
            .query(
                "inspect",
                &self.sql.inspect,
                &[(&pool.as_uuid(), Type::UUID), (&now, Type::INT8)],
            )
            .await?;
        let row = rows.first().ok_or(Error::PoolNotFound { pool })?;
        state(pool, row, "inspect")
    }

    async fn set_draining(&self, pool: PoolId, draining: bool) -> Result<PoolState> {
        let now = self.now_param();
        let rows = self
            .query(
                "set_draining",
                &self.sql.set_draining,
                &[
                    (&pool.as_uuid(), Type::UUID),
                    (&draining, Type::BOOL),
                    (&now, Type::INT8),
                ],
            )
            .await?;
        let row = rows.first().ok_or(Error::PoolNotFound { pool })?;
        state(pool, row, "set_draining")
    }

    async fn delete(&self, pool: PoolId) -> Result<bool> {
        let rows = self
            .query("delete", &self.sql.delete, &[(&pool.as_uuid(), Type::UUID)])
            .await?;
        let existed = first(&rows, "delete")?
            .try_get(0)
            .map_err(storage("delete"))?;
        Ok(existed)
    }

    async fn try_borrow(&self, request: &BorrowRequest) -> Result<TryBorrow> {
        let args = sql::TryBorrowArgs {
            pool: *request.pool.as_uuid(),
            lease: *request.lease.as_uuid(),
            ttl: millis(request.ttl),
            waiter: request.waiter.map(|w| *w.as_uuid()),
            key: request.key.as_deref(),
            owner: request.owner.as_deref(),
            now: self.now_param(),
            backend: self.backend(),
            keep_place: true,
            slots: i64::from(request.slots),
            session: request.session.map(|s| *s.as_uuid()),
            hold: request.hold.map(millis),
            retried: request.retried,
        };
        let rows = self
            .query("borrow", &self.sql.try_borrow, &args.typed())
            .await?;
        let row = first(&rows, "borrow")?;
        match sql::attempt(row, request.pool).map_err(storage("borrow"))? {
            Attempt::Granted(lease) => Ok(TryBorrow::Granted { lease }),
            Attempt::Exhausted(next_expiry) => Ok(TryBorrow::Exhausted { next_expiry }),
            Attempt::Missing(_) => Err(Error::PoolNotFound { pool: request.pool }),
            Attempt::Draining => Err(Error::Draining { pool: request.pool }),
            Attempt::KeyReused => Err(Error::KeyReused { pool: request.pool }),
            Attempt::SessionEnded => Err(self.session.ended_error(request.session)),
        }
    }

    async fn try_borrow_all(&self, requests: &[BorrowRequest]) -> Result<TryBorrowAll> {
        let Some(head) = requests.first() else {
            return Ok(TryBorrowAll::Granted { leases: Vec::new() });
        };
        let (now, ttl, backend) = (self.now_param(), millis(head.ttl), self.backend());
        let pools: Vec<_> = requests.iter().map(|r| r.pool.as_uuid()).collect();
        let leases: Vec<_> = requests.iter().map(|r| r.lease.as_uuid()).collect();
        let waiter = head.waiter.map(|w| *w.as_uuid());
        let (key, owner) = (head.key.as_deref(), head.owner.as_deref());
        let slots: Vec<i64> = requests.iter().map(|r| i64::from(r.slots)).collect();
        let session = head.session.map(|s| *s.as_uuid());
        let params: [&(dyn ToSql + Sync); 11] = [
            &pools,
            &leases,
            &ttl,
            &waiter,
            &key,
            &owner,
            &now,
            &backend,
            &slots,
            &session,
            &head.retried,
        ];
        let typed: Vec<_> = params
            .into_iter()
            .zip(sql::TRY_BORROW_ALL.iter().cloned())
            .collect();
        let rows = self
            .query("borrow", &self.sql.try_borrow_all, &typed)
            .await?;
        let mut granted = Vec::with_capacity(requests.len());
        let mut blocked = Vec::new();
        for (row, request) in rows.iter().zip(requests) {
            match sql::attempt(row, request.pool).map_err(storage("borrow"))? {
                Attempt::Granted(lease) => granted.push(lease),
                Attempt::Exhausted(at) => blocked.push(at),
                Attempt::Draining => return Err(Error::Draining { pool: request.pool }),
                Attempt::KeyReused => return Err(Error::KeyReused { pool: request.pool }),
                Attempt::SessionEnded => return Err(self.session.ended_error(head.session)),
                Attempt::Missing(pool) => {
                    return Err(Error::PoolNotFound {
                        pool: pool.unwrap_or(request.pool),
                    });
                }
            }
        }
        if blocked.is_empty() {
            return Ok(TryBorrowAll::Granted { leases: granted });
        }
        Ok(TryBorrowAll::refused(blocked))
    }

    async fn return_lease(&self, pool: PoolId, lease: LeaseId) -> Result<bool> {
        let returned = self.return_then_wake(pool, lease).await?;
        if returned {
            self.changes.notify(pool);
        }
        Ok(returned)
    }

    async fn renew(&self, pool: PoolId, lease: LeaseId, ttl: Duration) -> Result<Option<Lease>> {
        let ttl = millis(ttl);
        let now = self.now_param();
        let rows = self
            .query(
                "renew",
                &self.sql.renew,
                &[
                    (&pool.as_uuid(), Type::UUID),
                    (&lease.as_uuid(), Type::UUID),
                    (&ttl, Type::INT8),
                    (&now, Type::INT8),
                ],
            )
            .await?;
        match sql::attempt(first(&rows, "renew")?, pool).map_err(storage("renew"))? {
            Attempt::Granted(lease) => Ok(Some(lease)),
            Attempt::Exhausted(_)
            | Attempt::Draining
            | Attempt::SessionEnded
            | Attempt::KeyReused => Ok(None),
            Attempt::Missing(_) => Err(Error::PoolNotFound { pool }),
        }
    }

    async fn holders(&self, pool: PoolId) -> Result<Vec<Holder>> {
        let now = self.now_param();
        let rows = self
            .query(
                "holders",
                &self.sql.holders,
                &[(&pool.as_uuid(), Type::UUID), (&now, Type::INT8)],
            )
            .await?;
        let exists: bool = first(&rows, "holders")?
            .try_get(0)
            .map_err(storage("holders"))?;
        if !exists {
            return Err(Error::PoolNotFound { pool });
        }
        let mut holders = Vec::with_capacity(rows.len());
        for row in &rows {
            let lease: Option<uuid::Uuid> = row.try_get(1).map_err(storage("holders"))?;
            if lease.is_some() {
                holders.push(sql::holder(row, pool, 1).map_err(storage("holders"))?);
            }
        }
        Ok(holders)
    }

    async fn unbind(&self, pool: PoolId, lease: LeaseId) -> Result<bool> {
        let now = self.now_param();
        let rows = self
            .query(
                "unbind",
                &self.sql.unbind,
                &[
                    (&pool.as_uuid(), Type::UUID),
                    (&lease.as_uuid(), Type::UUID),
                    (&now, Type::INT8),
                ],
            )
            .await?;
        first(&rows, "unbind")?
            .try_get(0)
            .map_err(storage("unbind"))
    }

    async fn force_return(&self, pool: PoolId, position: u32) -> Result<Option<Holder>> {
        let (now, position) = (self.now_param(), i64::from(position));
        let rows = self
            .query(
                "force_return",
                &self.sql.force_return,
                &[
                    (&pool.as_uuid(), Type::UUID),
                    (&position, Type::INT8),
                    (&now, Type::INT8),
                ],
            )
            .await?;
        let row = first(&rows, "force_return")?;
        let status: i16 = row.try_get(0).map_err(storage("force_return"))?;
        match status {
            0 => Ok(Some(
                sql::holder(row, pool, 1).map_err(storage("force_return"))?,
            )),
            1 => Ok(None),
            _ => Err(Error::PoolNotFound { pool }),
        }
    }

    async fn place(&self, pool: PoolId, waiter: WaiterId) -> Result<Option<u64>> {
        let rows = self
            .query(
                "place",
                &self.sql.place,
                &[
                    (&pool.as_uuid(), Type::UUID),
                    (&waiter.as_uuid(), Type::UUID),
                    (&self.now_param(), Type::INT8),
                ],
            )
            .await?;
        let found: i64 = first(&rows, "place")?
            .try_get(0)
            .map_err(storage("place"))?;
        Ok((found > 0).then_some(found.unsigned_abs()))
    }

    async fn leave_queue(&self, pool: PoolId, waiter: WaiterId) -> Result<()> {
        let rows = self
            .query(
                "leave_queue",
                &self.sql.leave_queue,
                &[
                    (&pool.as_uuid(), Type::UUID),
                    (&waiter.as_uuid(), Type::UUID),
                ],
            )
            .await?;
        let left: bool = first(&rows, "leave_queue")?
            .try_get(0)
            .map_err(storage("leave_queue"))?;
        if left {
            self.changes.notify(pool);
        }
        Ok(())
    }

    async fn pools(&self, after: Option<PoolId>, limit: u32) -> Result<Vec<PoolState>> {
        let Some(start) = semaphore_core::store::page_start(after) else {
            return Ok(Vec::new());
        };
        let rows = self
            .query(
                "pools",
                &self.sql.pools,
                &[
                    (&start.as_uuid(), Type::UUID),
                    (&i64::from(limit), Type::INT8),
                    (&self.now_param(), Type::INT8),
                ],
            )
            .await?;
        rows.iter()
            .map(|row| {
                let id: uuid::Uuid = row.try_get(4).map_err(storage("pools"))?;
                state(PoolId::from_uuid(id), row, "pools")
            })
            .collect()
    }

    async fn queue(&self, pool: PoolId) -> Result<Vec<semaphore_core::QueuedPlace>> {
        let rows = self
            .query(
                "queue",
                &self.sql.queue,
                &[
                    (&pool.as_uuid(), Type::UUID),
                    (&self.now_param(), Type::INT8),
                ],
            )
            .await?;
        rows.iter()
            .map(|row| {
                let waiter: uuid::Uuid = row.try_get(0)?;
                let slots: i64 = row.try_get(1)?;
                let since: i64 = row.try_get(2)?;
                let held: bool = row.try_get(3)?;
                Ok(semaphore_core::QueuedPlace::kept(
                    WaiterId::from_uuid(waiter),
                    u32::try_from(slots).unwrap_or(u32::MAX),
                    semaphore_core::store::from_unix_ms(u64::try_from(since).unwrap_or(0)),
                    held,
                ))
            })
            .collect::<std::result::Result<_, tokio_postgres::Error>>()
            .map_err(storage("queue"))
    }
}
