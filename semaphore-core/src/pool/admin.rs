//! A pool's own life: register (create or set its count), inspect, delete.

use crate::telemetry;
use crate::{error::Result, lease::PoolState, pool::Pool};

impl Pool {
    /// Creates the pool with `count` slots, or sets the count of an existing
    /// one; returns its state. Idempotent. Raising the count wakes
    /// waiters at once; lowering it below `in_use` revokes nothing and only
    /// withholds new grants (positions at or above the new count are not
    /// handed out).
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`](crate::Error::InvalidArgument) naming `count` if it is above
    ///   [`Limits::max_count`](crate::Limits::max_count) (default 1000); nothing changes.
    /// - [`Error::Storage`](crate::Error::Storage) if the store failed; nothing changes.
    ///
    /// # Cancel safety
    /// Dropping the future may or may not leave the count set; it is never
    /// half set.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use semaphore_memory::{MemoryStore, Pool, PoolId};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), semaphore_memory::Error> {
    /// # let pool = Pool::new(Arc::new(MemoryStore::new()), PoolId::from_name("jobs"));
    /// let state = pool.register(4).await?; // created with 4 slots
    /// assert_eq!((state.count, state.available), (4, 4));
    /// pool.register(2).await?; // registering again sets the count
    /// assert_eq!(pool.inspect().await?.count, 2);
    /// # Ok(()) }
    /// ```
    pub async fn register(&self, count: u32) -> Result<PoolState> {
        let count = self.limits.check_count(count)?;
        let state = telemetry::counted(&self.name, self.store.register(self.id, count).await)?;
        self.changed();
        Ok(state)
    }

    /// The pool's `{id, count, in_use, available}` as of one instant.
    /// Expired leases never count. Never shows lease ids.
    ///
    /// # Errors
    /// [`Error::PoolNotFound`](crate::Error::PoolNotFound) for an unregistered or deleted pool;
    /// [`Error::Storage`](crate::Error::Storage) if the store failed.
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
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
    /// let _held = pool.borrow(Duration::from_secs(30), Duration::ZERO).await?;
    /// let state = pool.inspect().await?;
    /// assert_eq!((state.count, state.in_use, state.available), (2, 1, 1));
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self) -> Result<PoolState> {
        telemetry::counted(&self.name, self.store.inspect(self.id).await)
    }

    /// Removes the pool and all its leases; `true` if it existed.
    /// Idempotent. Borrowers waiting on it fail with
    /// [`Error::PoolNotFound`](crate::Error::PoolNotFound) at once; its lease ids stop being valid.
    /// Tokens keep growing if it is registered again.
    ///
    /// # Errors
    /// [`Error::Storage`](crate::Error::Storage) if the store failed; nothing was removed.
    ///
    /// # Cancel safety
    /// Dropping the future may or may not leave the pool deleted; it is
    /// never half deleted.
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
    /// assert!(pool.delete().await?); // it existed
    /// assert!(!pool.delete().await?); // idempotent
    /// assert!(matches!(pool.inspect().await, Err(semaphore_memory::Error::PoolNotFound { .. })));
    /// # Ok(()) }
    /// ```
    pub async fn delete(&self) -> Result<bool> {
        let deleted = telemetry::counted(&self.name, self.store.delete(self.id).await)?;
        self.changed();
        Ok(deleted)
    }
}
