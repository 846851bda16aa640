//! [`Pool`]'s borrows: waiting or not, with options or not, with a guard
//! that borrows the handle or owns a clone of it, and the blocking API.

use std::time::Duration;

use crate::options::Labels;
use crate::pool::Acquired;
use crate::{
    error::Result, guard::LeaseGuard, guard::OwnedLeaseGuard, options::BorrowOptions, pool::Pool,
};

impl Pool {
    /// Borrows the lowest free slot for `ttl`, waiting up to `wait` for one
    /// to free up; the lease is returned when the guard drops.
    ///
    /// `ttl` must be above zero; it is clamped to [`Limits::max_ttl`](crate::Limits::max_ttl) and
    /// rounded up to whole milliseconds. `wait` is clamped to
    /// [`Limits::max_wait`](crate::Limits::max_wait); zero means fail at once if no slot is free.
    /// Expiries and deadlines saturate at [`max_time`](crate::store::max_time),
    /// so no limit, however high, makes one overflow or wrap.
    /// The grant is immediate if a slot is free and no earlier borrower in
    /// this process is still waiting. Otherwise the borrower queues, first
    /// come first served, and is woken the instant a lease is returned,
    /// the count is raised, or the earliest lease expires.
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`](crate::Error::InvalidArgument) naming `ttl` if it is zero.
    /// - [`Error::PoolNotFound`](crate::Error::PoolNotFound) at once for an unknown pool, whatever
    ///   `wait` is, and at once for waiters when the pool is deleted.
    /// - [`Error::Exhausted`](crate::Error::Exhausted) if no slot freed up within `wait`.
    /// - [`Error::NoRuntime`](crate::Error::NoRuntime) if it must wait outside a tokio runtime (see
    ///   [Runtime](Pool#runtime)).
    /// - [`Error::Storage`](crate::Error::Storage) if the store failed: at once if `wait` is zero
    ///   or the failure is not retryable; a retryable failure of a borrower
    ///   that waits (a lost connection, a busy file), on its first attempt or
    ///   a later one, is retried with backoff (50 ms, doubling to 1 s) until
    ///   `wait` runs out, and then returned instead of
    ///   [`Error::Exhausted`](crate::Error::Exhausted).
    ///
    /// # Cancel safety
    /// Cancel safe. Dropping the future while it waits takes nothing
    /// and leaves the queue, letting the next waiter in. If the store
    /// had already granted when the future was dropped, the lease is returned
    /// at once, not left to its ttl.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use semaphore_memory::{MemoryStore, Pool, PoolId};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), semaphore_memory::Error> {
    /// # let pool = Pool::new(Arc::new(MemoryStore::new()), PoolId::from_name("jobs"));
    /// # pool.register(2).await?;
    /// // Hold a slot for at most 30 s; wait up to 5 s for one to free up.
    /// let lease = pool.borrow(Duration::from_secs(30), Duration::from_secs(5)).await?;
    /// println!("slot {} with fencing token {}", lease.position, lease.token);
    /// drop(lease); // returned at once; the next waiter is woken
    /// # Ok(()) }
    /// ```
    pub async fn borrow(&self, ttl: Duration, wait: Duration) -> Result<LeaseGuard<&Pool>> {
        let (lease, ttl) = match self.acquire(ttl, wait, Labels::default()) {
            Acquired::Now(now) => now?,
            Acquired::Later(later) => later.await?,
        };
        Ok(LeaseGuard::new(self, lease, ttl))
    }

    /// [`borrow`](Pool::borrow), with a guard that owns a clone of this
    /// handle, for `'static` tasks.
    ///
    /// # Errors
    /// Those of [`borrow`](Pool::borrow).
    ///
    /// # Cancel safety
    /// As [`borrow`](Pool::borrow): a dropped call takes nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use semaphore_memory::{MemoryStore, Pool, PoolId};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), semaphore_memory::Error> {
    /// # let pool = Pool::new(Arc::new(MemoryStore::new()), PoolId::from_name("jobs"));
    /// # pool.register(2).await?;
    /// let lease = pool.borrow_owned(Duration::from_secs(30), Duration::ZERO).await?;
    /// // 'static: the guard can move into a spawned task.
    /// tokio::spawn(async move {
    ///     let _held = lease; // returned when the task ends
    /// })
    /// .await
    /// .unwrap();
    /// assert_eq!(pool.inspect().await?.in_use, 0);
    /// # Ok(()) }
    /// ```
    pub async fn borrow_owned(&self, ttl: Duration, wait: Duration) -> Result<OwnedLeaseGuard> {
        let (lease, ttl) = match self.acquire(ttl, wait, Labels::default()) {
            Acquired::Now(now) => now?,
            Acquired::Later(later) => later.await?,
        };
        Ok(LeaseGuard::new(self.clone(), lease, ttl))
    }

    /// [`borrow`](Pool::borrow) with an idempotency key and an owner label
    /// ([`BorrowOptions`]).
    ///
    /// With a key, a borrow made while the key's lease is active returns
    /// that very lease (same id, position, token and expiry) at once, takes
    /// no second slot and does not wait. So a caller that lost the reply to a
    /// borrow (a timeout, a crash between grant and reply) retries with the
    /// same key and gets what was granted. Once that lease is returned or
    /// expired, the key borrows anew. Two guards for one key hold one lease:
    /// the first dropped returns it.
    ///
    /// ```
    /// use std::{sync::Arc, time::Duration};
    /// use semaphore_memory::{BorrowOptions, MemoryStore, Pool, PoolId};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), semaphore_memory::Error> {
    /// let pool = Pool::new(Arc::new(MemoryStore::new()), PoolId::from_name("payments"));
    /// pool.register(2).await?;
    /// let options = BorrowOptions::new().key("invoice-7731").owner("worker-3");
    /// let ttl = Duration::from_secs(30);
    ///
    /// let first = pool.borrow_with(ttl, Duration::ZERO, options.clone()).await?.forget();
    /// // The reply was lost; the retry gets the same lease, not a second slot.
    /// let retry = pool.borrow_with(ttl, Duration::ZERO, options).await?;
    /// assert_eq!((retry.id, retry.token), (first.id, first.token));
    /// assert_eq!(pool.inspect().await?.in_use, 1);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// Those of [`borrow`](Pool::borrow), and [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// naming `key` or `owner` for a label that is empty, longer than
    /// [`Limits::max_key_len`](crate::Limits::max_key_len) or [`Limits::max_owner_len`](crate::Limits::max_owner_len) bytes, or holds a
    /// control, format, line or paragraph separator character; nothing
    /// changes.
    ///
    /// # Cancel safety
    /// As [`borrow`](Pool::borrow). A dropped retry never returns the keyed
    /// lease it was answered with: that lease is the first borrow's.
    pub async fn borrow_with(
        &self,
        ttl: Duration,
        wait: Duration,
        options: BorrowOptions,
    ) -> Result<LeaseGuard<&Pool>> {
        let labels = options.check(&self.limits)?;
        let (lease, ttl) = match self.acquire(ttl, wait, labels) {
            Acquired::Now(now) => now?,
            Acquired::Later(later) => later.await?,
        };
        Ok(LeaseGuard::new(self, lease, ttl))
    }

    /// [`borrow_with`](Pool::borrow_with), with a guard that owns a clone of
    /// this handle.
    ///
    /// # Errors
    /// Those of [`borrow_with`](Pool::borrow_with).
    ///
    /// # Cancel safety
    /// As [`borrow_with`](Pool::borrow_with).
    pub async fn borrow_owned_with(
        &self,
        ttl: Duration,
        wait: Duration,
        options: BorrowOptions,
    ) -> Result<OwnedLeaseGuard> {
        let labels = options.check(&self.limits)?;
        let (lease, ttl) = match self.acquire(ttl, wait, labels) {
            Acquired::Now(now) => now?,
            Acquired::Later(later) => later.await?,
        };
        Ok(LeaseGuard::new(self.clone(), lease, ttl))
    }

    /// [`borrow`](Pool::borrow) with a zero wait: a free slot or
    /// [`Error::Exhausted`](crate::Error::Exhausted) at once.
    ///
    /// # Errors
    /// Those of [`borrow`](Pool::borrow); [`Error::Exhausted`](crate::Error::Exhausted) whenever no
    /// slot is free for it now.
    ///
    /// # Cancel safety
    /// As [`borrow`](Pool::borrow): a dropped call takes nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use semaphore_memory::{MemoryStore, Pool, PoolId};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), semaphore_memory::Error> {
    /// # let pool = Pool::new(Arc::new(MemoryStore::new()), PoolId::from_name("jobs"));
    /// pool.register(1).await?;
    /// let first = pool.try_borrow(Duration::from_secs(30)).await?;
    /// // Full: no waiting, Exhausted at once.
    /// assert!(matches!(
    ///     pool.try_borrow(Duration::from_secs(30)).await,
    ///     Err(semaphore_memory::Error::Exhausted { .. })
    /// ));
    /// drop(first);
    /// # Ok(()) }
    /// ```
    pub async fn try_borrow(&self, ttl: Duration) -> Result<LeaseGuard<&Pool>> {
        self.borrow(ttl, Duration::ZERO).await
    }
}
