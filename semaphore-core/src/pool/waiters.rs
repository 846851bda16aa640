//! [`Pool`]'s view of its waiters in this process: how many, and how long
//! the longest has waited (the queue, as an operator watches it).

use std::time::Duration;

use crate::Pool;

impl Pool {
    /// The number of borrowers waiting on this pool in this process, a
    /// figure to log or export as a gauge. Cheap: one atomic load when no
    /// borrower of any pool waits.
    ///
    /// It counts this process's waiters only. A store shared by processes
    /// may report more: the SQLite store tells how many processes have
    /// borrowers queued on a pool (`SqliteStore::queue_heads`).
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use semaphore_memory::{MemoryStore, Pool, PoolId};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), semaphore_memory::Error> {
    /// # let pool = Pool::new(Arc::new(MemoryStore::new()), PoolId::from_name("jobs"));
    /// pool.register(0).await?; // no slot: a borrow must wait
    /// let waiter = tokio::spawn({
    ///     let pool = pool.clone();
    ///     async move { pool.borrow(Duration::from_secs(30), Duration::from_secs(60)).await.map(|g| g.forget()) }
    /// });
    /// while pool.waiting() == 0 {
    ///     tokio::task::yield_now().await;
    /// }
    /// assert_eq!(pool.waiting(), 1);
    /// pool.register(1).await?; // raising the count lets it in
    /// assert_eq!(waiter.await.unwrap()?.position, 0);
    /// # Ok(()) }
    /// ```
    pub fn waiting(&self) -> usize {
        self.store.changes().waiting(self.id)
    }

    /// How long the longest-waiting borrower of this pool in this process
    /// has waited so far, by the store's clock; `None` if none waits. What
    /// an operator watches to see a pool starve (throttle's
    /// `longest_pending_sec`).
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use semaphore_memory::{ManualClock, MemoryStore, Pool, PoolId};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), semaphore_memory::Error> {
    /// let clock = Arc::new(ManualClock::new());
    /// let pool = Pool::new(Arc::new(MemoryStore::with_clock(clock.clone())), PoolId::from_name("jobs"));
    /// pool.register(0).await?; // nothing to grant yet
    /// assert_eq!(pool.longest_wait(), None);
    /// let waiter = tokio::spawn({
    ///     let pool = pool.clone();
    ///     async move { pool.borrow(Duration::from_secs(30), Duration::from_secs(60)).await.map(|g| g.forget()) }
    /// });
    /// while pool.waiting() == 0 {
    ///     tokio::task::yield_now().await;
    /// }
    /// clock.advance(Duration::from_secs(5));
    /// assert_eq!(pool.longest_wait(), Some(Duration::from_secs(5)));
    /// pool.register(1).await?;
    /// waiter.await.unwrap()?;
    /// assert_eq!(pool.longest_wait(), None);
    /// # Ok(()) }
    /// ```
    pub fn longest_wait(&self) -> Option<Duration> {
        self.store
            .changes()
            .longest_wait(self.id, self.store.clock().now())
    }
}
