//! A handed slot held on arrival (rule "A handed slot is held on arrival"):
//! a return that hands its slot to another process's queued head
//! (`semaphore_return_lease`) sends the lease in its wake-up's
//! notification (`semaphore_returned`); the head's process holds it from
//! the notification's arrival, without a look, and confirms it in the
//! background ([`Handed::hold`]): the head takes that very lease
//! (`semaphore_confirm_handed`), to the expiry its holder counts. Until then
//! the lease lasts [`HANDED_BOUND_MS`](crate::schema::HANDED_BOUND_MS) at
//! most, the bound the notification carries.

use std::sync::Arc;

use deadpool_postgres::Pool as ConnectionPool;
use semaphore_core::store::{Changes, DecidingClock, Handed, SessionEnds, unix_ms};
use semaphore_core::{LeaseId, PoolId, Result, store::WaiterId};
use tokio_postgres::types::{ToSql, Type};

use crate::error::{pool as pool_error, storage};
use crate::sql::{self, Sql};

/// What confirming a lease needs: a connection of the store's pool and
/// its statements.
#[derive(Clone)]
pub(crate) struct Arrivals {
    pub(crate) connections: ConnectionPool,
    pub(crate) sql: Arc<Sql>,
    pub(crate) time: DecidingClock,
}

impl Arrivals {
    pub(crate) fn new(connections: &ConnectionPool, sql: &Arc<Sql>, time: &DecidingClock) -> Self {
        Self {
            connections: connections.clone(),
            sql: sql.clone(),
            time: time.clone(),
        }
    }

    /// Holds `handed` for its head if it waits here (see [`Handed::hold`]);
    /// whether it did.
    pub(crate) fn hold(&self, changes: &Changes, ends: &SessionEnds, handed: Handed) -> bool {
        let (pool, id, waiter) = (handed.lease.pool, handed.lease.id, handed.waiter);
        let expiry = i64::try_from(unix_ms(handed.lease.expires_at)).unwrap_or(i64::MAX);
        let this = self.clone();
        handed.hold(changes, Some(ends), &self.time, move || {
            let this = this.clone();
            async move { this.confirm(pool, waiter, id, expiry).await }
        })
    }

    /// One confirmation: the head `waiter` takes lease `id` of `pool`, to
    /// expire at `expiry` (unix ms) at the earliest; whether it was still
    /// handed to it.
    async fn confirm(
        &self,
        pool: PoolId,
        waiter: WaiterId,
        id: LeaseId,
        expiry: i64,
    ) -> Result<bool> {
        const OPERATION: &str = "confirm";
        let client = self
            .connections
            .get()
            .await
            .map_err(pool_error(OPERATION))?;
        let now = self
            .time
            .now_param()
            .map(|ms| i64::try_from(ms).unwrap_or(i64::MAX));
        let params: [(&(dyn ToSql + Sync), Type); 5] = [
            (pool.as_uuid(), Type::UUID),
            (waiter.as_uuid(), Type::UUID),
            (id.as_uuid(), Type::UUID),
            (&expiry, Type::INT8),
            (&now, Type::INT8),
        ];
        let rows = sql::run(&client, self.sql.prepared, &self.sql.confirm, &params)
            .await
            .map_err(storage(OPERATION))?;
        match rows.first() {
            Some(row) => row.try_get(0).map_err(storage(OPERATION)),
            None => Ok(false),
        }
    }
}
