//! A return, with the hand-off of its slot: to another process's
//! queued head in the database, or to this process's head claimed in the
//! core ([`Claim`]), then the wake-up in a transaction of its own.

use std::sync::Arc;

use deadpool_postgres::Pool as ConnectionPool;
use semaphore_core::store::{Changes, Claim};
use semaphore_core::{Error, LeaseId, PoolId, Result};
use tokio_postgres::Row;
use tokio_postgres::types::{ToSql, Type};

use crate::error::{pool as pool_error, storage};
use crate::primitives::first;
use crate::sql::{self, Attempt, ReturnArgs, Sql};

const OPERATION: &str = "return";

/// What a return needs, owned, so that one that claimed a head can finish
/// in a task of its own whatever becomes of its caller.
pub(crate) struct Returning {
    pub(crate) connections: ConnectionPool,
    pub(crate) sql: Arc<Sql>,
    pub(crate) changes: Arc<Changes>,
    /// The test's now, unix ms, or `None` for the server's clock.
    pub(crate) now: Option<i64>,
    /// The session bound leases name, for a claimed head's
    /// lease.
    pub(crate) session: Option<semaphore_core::SessionId>,
}

impl Returning {
    /// Returns `lease` of `pool`, handing its slot to the queued head of
    /// another process or to `claim`'s head where it can; delivers the
    /// lease to the claimed head (or returns it if that head left), then
    /// runs the pool's wake-up: a notification if another process's head
    /// was handed the slot or a head is queued. Whether `lease` was active.
    ///
    /// The wake-up is sent after the return, not pipelined with it:
    /// PgBouncer in transaction mode (1.18 at least) may hand the server
    /// connection to another client between two pipelined transactions,
    /// and the second one's answer then reached that other client (seen in
    /// CI as a borrow reading the wake-up's `void` row). It is kept out of
    /// the return's transaction because PostgreSQL serializes the commits
    /// of notifying transactions; one that fails is left to the waiters'
    /// fallback poll.
    pub(crate) async fn run(
        self,
        pool: PoolId,
        lease: LeaseId,
        claim: Option<Claim>,
    ) -> Result<bool> {
        let client = self
            .connections
            .get()
            .await
            .map_err(pool_error(OPERATION))?;
        let rows = self.call(&client, pool, lease, claim.as_ref()).await?;
        let answer = returned(&rows)?;
        let (mut handed, mut free) = (answer.handed, answer.free);
        let mut handed_lease = answer.handed_lease;
        let row = first(&rows, OPERATION)?;
        let attempt = sql::attempt_at(row, pool, 8).map_err(storage(OPERATION))?;
        if let (Some(claim), Attempt::Granted(granted)) = (claim, attempt)
            && let Err(unwanted) = claim.deliver(granted)
        {
            // Its head gave up meanwhile: nobody holds it.
            let again = returned(&self.call(&client, pool, unwanted.id, None).await?)?;
            handed |= again.handed;
            free |= again.free;
            handed_lease = handed_lease.or(again.handed_lease);
        }
        // Nobody to wake when the slot went on to this process's head.
        if handed || free {
            let wake: [(&(dyn ToSql + Sync), Type); 3] = [
                (pool.as_uuid(), Type::UUID),
                (&handed, Type::BOOL),
                (&handed_lease, Type::UUID),
            ];
            let _woken = sql::run(&client, self.sql.prepared, &self.sql.wake, &wake).await;
        }
        Ok(answer.returned)
    }

    /// `semaphore_return_lease`, with `claim`'s head as the one to grant
    /// the slot to if nobody is queued ahead of it.
    async fn call(
        &self,
        client: &deadpool_postgres::Client,
        pool: PoolId,
        lease: LeaseId,
        claim: Option<&Claim>,
    ) -> Result<Vec<Row>> {
        let args = ReturnArgs::new(
            pool,
            lease,
            self.now,
            self.changes.hand_offs_allowed(),
            claim.map(Claim::request),
            self.session.map(|s| *s.as_uuid()),
        );
        let params = args.typed();
        sql::run(client, self.sql.prepared, &self.sql.return_lease, &params)
            .await
            .map_err(storage(OPERATION))
    }
}

/// `semaphore_return_lease`'s answer, but for a grant to a claimed head.
pub(crate) struct Returned {
    /// The lease was active.
    pub(crate) returned: bool,
    /// Its slot went to another process's queued head.
    pub(crate) handed: bool,
    /// Its slot was left free.
    pub(crate) free: bool,
    /// The lease its slot went to, if another process's queued head got
    /// it: the wake-up carries it, for the head to hold on arrival.
    pub(crate) handed_lease: Option<uuid::Uuid>,
}

pub(crate) fn returned(rows: &[Row]) -> Result<Returned> {
    let row = first(rows, OPERATION)?;
    let get = |i| row.try_get(i).map_err(storage(OPERATION));
    let status: i16 = row.try_get(0).map_err(storage(OPERATION))?;
    let handed: bool = get(6)?;
    let handed_lease = if status == 1 && handed {
        row.try_get(1).map_err(storage(OPERATION))?
    } else {
        None
    };
    Ok(Returned {
        returned: get(5)?,
        handed,
        free: get(7)?,
        handed_lease,
    })
}

/// The error of a return whose task failed to finish: retryable if the
/// task was cancelled (spawned on a runtime that was shutting down, as a
/// guard dropped at its end spawns it: the return may not have run, and a
/// second one that finds it done changes nothing), not if it panicked.
pub(crate) fn lost(e: tokio::task::JoinError) -> Error {
    Error::Storage {
        operation: OPERATION,
        retryable: e.is_cancelled(),
        source: Box::new(e),
    }
}
