//! [`SqliteStore`]'s [`Store`] primitives: each one transaction on the
//! file, through the handle's write path (see the parent module).

use std::time::Duration;

use rusqlite::TransactionBehavior;
use semaphore_core::store::{
    BorrowRequest, Parts, Store, TryBorrow, TryBorrowAll, WaiterId, async_trait,
};
use semaphore_core::{Error, Holder, Lease, LeaseId, PoolId, PoolState, Result};

use super::SqliteStore;
use crate::sql;
use crate::wake::queue;

#[async_trait]
impl Store for SqliteStore {
    fn parts(&self) -> Parts<'_> {
        Parts {
            clock: self.time.clock(),
            changes: &self.changes,
            session: None,
            max_ttl: Duration::MAX,
            in_place: None,
        }
    }

    async fn register(&self, pool: PoolId, count: u32) -> Result<PoolState> {
        self.write_ringing(
            "register",
            pool,
            {
                let holders = self.holders.clone();
                move |c, now| sql::register(c, pool, count, now, &holders)
            },
            |_| true,
        )
        .await
        .map(|(out, _)| out)
    }

    async fn inspect(&self, pool: PoolId) -> Result<PoolState> {
        let holders = self.holders.clone();
        self.run("inspect", TransactionBehavior::Deferred, move |c, now| {
            sql::inspect(c, pool, now, &holders)
        })
        .await?
        .ok_or(Error::PoolNotFound { pool })
    }

    async fn delete(&self, pool: PoolId) -> Result<bool> {
        self.write_ringing("delete", pool, move |c, _| sql::delete(c, pool), |_| true)
            .await
            .map(|(out, _)| out)
    }

    async fn try_borrow(&self, request: &BorrowRequest) -> Result<TryBorrow> {
        // Before the watch is armed, whose lock a forked child must not take.
        self.process.check("borrow")?;
        if request.waiter.is_some() {
            // Before the check, so that any commit after it is seen.
            self.watch.arm();
        }
        let (request, floor) = (request.clone(), self.floor());
        let holders = self.holders.clone();
        self.write("borrow", move |c, now| {
            sql::try_borrow(c, &request, floor, now, &holders)
        })
        .await?
    }

    async fn try_borrow_all(&self, requests: &[BorrowRequest]) -> Result<TryBorrowAll> {
        self.process.check("borrow")?;
        if requests.iter().any(|r| r.waiter.is_some()) {
            self.watch.arm();
        }
        let (requests, floor) = (requests.to_vec(), self.floor());
        let holders = self.holders.clone();
        self.write("borrow", move |c, now| {
            sql::try_borrow_all(c, &requests, floor, now, &holders)
        })
        .await?
    }

    async fn set_draining(&self, pool: PoolId, draining: bool) -> Result<PoolState> {
        let holders = self.holders.clone();
        self.write_ringing(
            "set_draining",
            pool,
            move |c, now| sql::set_draining(c, pool, draining, now, &holders),
            |state| state.is_some(),
        )
        .await
        .map(|(out, _)| out)?
        .ok_or(Error::PoolNotFound { pool })
    }

    async fn renew(&self, pool: PoolId, lease: LeaseId, ttl: Duration) -> Result<Option<Lease>> {
        // A renewal can move the earliest expiry that a head waits for.
        self.write_ringing(
            "renew",
            pool,
            move |c, now| sql::renew(c, pool, lease, now, ttl),
            |renewed| matches!(renewed, Some(Some(_))),
        )
        .await
        .map(|(out, _)| out)?
        .ok_or(Error::PoolNotFound { pool })
    }

    async fn holders(&self, pool: PoolId) -> Result<Vec<Holder>> {
        let holders = self.holders.clone();
        self.run("holders", TransactionBehavior::Deferred, move |c, now| {
            sql::holders(c, pool, now, &holders)
        })
        .await?
        .ok_or(Error::PoolNotFound { pool })
    }

    async fn force_return(&self, pool: PoolId, position: u32) -> Result<Option<Holder>> {
        self.write_ringing(
            "force_return",
            pool,
            move |c, now| sql::force_return(c, pool, position, now),
            |ended| matches!(ended, Some(Some(_))),
        )
        .await
        .map(|(out, _)| out)?
        .ok_or(Error::PoolNotFound { pool })
    }

    async fn return_lease(&self, pool: PoolId, lease: LeaseId) -> Result<bool> {
        self.write_freeing(
            "return",
            pool,
            move |c, now| sql::return_lease(c, pool, lease, now),
            |returned| *returned,
        )
        .await
    }

    async fn unbind(&self, pool: PoolId, lease: LeaseId) -> Result<bool> {
        self.write("unbind", move |c, now| sql::unbind(c, pool, lease, now))
            .await
    }

    async fn return_held(&self, lease: Lease) -> Result<bool> {
        self.write_freeing(
            "return",
            lease.pool,
            move |c, now| sql::return_held(c, &lease, now),
            |returned| *returned,
        )
        .await
    }

    async fn place(&self, pool: PoolId, waiter: WaiterId) -> Result<Option<u64>> {
        self.run("place", TransactionBehavior::Deferred, move |c, now| {
            queue::place(c, pool, waiter, now)
        })
        .await
    }

    async fn leave_queue(&self, pool: PoolId, waiter: WaiterId) -> Result<()> {
        // A borrower refused because this head stood ahead of it may now
        // be granted.
        self.write_freeing(
            "leave_queue",
            pool,
            move |c, _| queue::leave_queue(c, pool, waiter),
            |left| *left,
        )
        .await
        .map(drop)
    }

    async fn pools(&self, after: Option<PoolId>, limit: u32) -> Result<Vec<PoolState>> {
        let Some(start) = semaphore_core::store::page_start(after) else {
            return Ok(Vec::new());
        };
        let holders = self.holders.clone();
        self.run("pools", TransactionBehavior::Deferred, move |c, now| {
            sql::pools(c, start, limit, now, &holders)
        })
        .await
    }

    async fn queue(&self, pool: PoolId) -> Result<Vec<semaphore_core::QueuedPlace>> {
        self.run("queue", TransactionBehavior::Deferred, move |c, now| {
            queue::queue(c, pool, now)
        })
        .await
    }
}
