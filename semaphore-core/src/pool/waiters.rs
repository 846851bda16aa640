//! [`Pool`]'s view of its waiters in this process: how many, and how long
//! the longest has waited (the queue, as an operator watches it).

use std::time::Duration;

use crate::pool::Pool;

/// The borrowers waiting on a pool in this process, as
/// [`Pool::waiting`] saw them at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Waiting {
    /// How many borrowers wait, a figure to log or export as a gauge.
    pub count: usize,
    /// How long the longest-waiting of them has waited so far, by the
    /// store's clock; `None` if none waits. What an operator watches to
    /// see a pool starve (throttle's `longest_pending_sec`).
    pub longest: Option<Duration>,
}

impl Pool {
    /// The borrowers waiting on this pool in this process: how many, and
    /// how long the longest has waited. Cheap: one atomic load when no
    /// borrower of any pool waits, and no clock read unless one waits on
    /// this pool.
    ///
    /// It counts this process's waiters only. A store shared by processes
    /// may report more: the SQLite store tells how many processes have
    /// borrowers queued on a pool (`SqliteStore::queue_heads`).
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use semaphore_memory::{ManualClock, MemoryStore, Pool, PoolId};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), semaphore_memory::Error> {
    /// let clock = Arc::new(ManualClock::new());
    /// let pool = Pool::new(Arc::new(MemoryStore::with_clock(clock.clone())), PoolId::from_name("jobs"));
    /// pool.register(0).await?; // no slot: a borrow must wait
    /// assert_eq!(pool.waiting().longest, None);
    /// let waiter = tokio::spawn({
    ///     let pool = pool.clone();
    ///     async move { pool.borrow(Duration::from_secs(30), Duration::from_secs(60)).await.map(|g| g.forget()) }
    /// });
    /// while pool.waiting().count == 0 {
    ///     tokio::task::yield_now().await;
    /// }
    /// clock.advance(Duration::from_secs(5));
    /// assert_eq!(pool.waiting().count, 1);
    /// assert_eq!(pool.waiting().longest, Some(Duration::from_secs(5)));
    /// pool.register(1).await?; // raising the count lets it in
    /// assert_eq!(waiter.await.unwrap()?.position, 0);
    /// assert_eq!(pool.waiting().count, 0);
    /// # Ok(()) }
    /// ```
    pub fn waiting(&self) -> Waiting {
        let changes = self.store.changes();
        let count = changes.waiting(self.id);
        if count == 0 {
            return Waiting::default();
        }
        let longest = changes.longest_wait(self.id, self.store.clock().now());
        Waiting { count, longest }
    }
}
