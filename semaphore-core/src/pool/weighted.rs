//! Weighted borrows on [`Pool`]: several slots in one lease (R15).

use std::time::Duration;

use crate::{BorrowOptions, LeaseGuard, OwnedLeaseGuard, Pool, Result};

impl Pool {
    /// Borrows `n` slots as one lease (R15): the `n` lowest free positions,
    /// under one lease id, one fencing token and one expiry, waiting up to
    /// `wait` until `n` are free at once. Returning, renewing, forcing or
    /// expiring the lease acts on all `n`; it counts `n` in `in_use`. The
    /// guard returns it on drop (R13). `borrow_n(1, ..)` is
    /// [`borrow`](Pool::borrow).
    ///
    /// Fairness is tokio's `acquire_many`'s: a borrower of `n` at the head of
    /// the queue is not overtaken by later borrowers, smaller or larger,
    /// while it waits for its `n` (R11), in this process and across the
    /// processes sharing a store. An `n` above the pool's current count
    /// waits for the count to be raised, as a borrow on a pool of count 0
    /// does (R2), but keeps its place without holding back anyone behind
    /// it meanwhile; once the count reaches `n` it is served before those
    /// queued after it (R15). This last part does not hold for
    /// a multi-pool borrow ([`PoolSet`](crate::PoolSet)), whose head holds
    /// back its queues as before.
    ///
    /// # Errors
    /// Those of [`borrow`](Pool::borrow), and [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// naming `slots` if `n` is 0 or above [`Limits::max_count`](crate::Limits::max_count); nothing
    /// changes.
    ///
    /// # Cancel safety
    /// As [`borrow`](Pool::borrow): a dropped borrow of `n` takes nothing
    /// and lets the smaller borrowers behind it move up.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use semaphore_memory::{MemoryStore, Pool, PoolId};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), semaphore_memory::Error> {
    /// let gpus = Pool::new(Arc::new(MemoryStore::new()), PoolId::from_name("gpus"));
    /// gpus.register(4).await?;
    /// let one = gpus.borrow(Duration::from_secs(60), Duration::ZERO).await?;
    /// // A 2-GPU job: the two lowest free positions, one lease.
    /// let two = gpus.borrow_n(2, Duration::from_secs(60), Duration::from_secs(5)).await?;
    /// assert_eq!(&two.positions[..], &[1, 2]);
    /// assert_eq!(gpus.inspect().await?.in_use, 3);
    /// drop(two); // both slots come back at once
    /// assert_eq!(gpus.inspect().await?.in_use, 1);
    /// # drop(one);
    /// # Ok(()) }
    /// ```
    pub async fn borrow_n(
        &self,
        n: u32,
        ttl: Duration,
        wait: Duration,
    ) -> Result<LeaseGuard<&Pool>> {
        self.borrow_with(ttl, wait, BorrowOptions::new().slots(n))
            .await
    }

    /// [`borrow_n`](Pool::borrow_n), with a guard that owns a clone of this
    /// handle, for `'static` tasks. Same errors and cancel safety.
    pub async fn borrow_owned_n(
        &self,
        n: u32,
        ttl: Duration,
        wait: Duration,
    ) -> Result<OwnedLeaseGuard> {
        self.borrow_owned_with(ttl, wait, BorrowOptions::new().slots(n))
            .await
    }
}
