//! Draining a pool: no new grants while its holders finish (rule "Drain").

use crate::telemetry;
use crate::{error::Result, lease::PoolState, pool::Pool};

impl Pool {
    /// Starts (`true`) or ends (`false`) the pool's drain; returns its state.
    ///
    /// While a pool drains it grants nothing new: a borrow fails with
    /// [`Error::Draining`](crate::Error::Draining) at once, and a borrower
    /// already waiting fails with it as soon as the drain starts, unless it
    /// borrowed with
    /// [`BorrowOptions::wait_while_draining`](crate::BorrowOptions::wait_while_draining)
    /// and so waits for the drain to end. Returns, renewals, forced returns
    /// and count changes go on, so holders finish and give their slots back;
    /// [`inspect`](Pool::inspect) shows `draining`. The flag is kept by the
    /// store: every process and server sharing it sees the drain. Idempotent.
    ///
    /// # Errors
    /// [`Error::PoolNotFound`](crate::Error::PoolNotFound) for an unknown
    /// pool; [`Error::Storage`](crate::Error::Storage) if the store failed,
    /// and then nothing changed.
    ///
    /// # Cancel safety
    /// Dropping the future may or may not leave the flag set.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use semaphore_memory::{Error, MemoryStore, Pool, PoolId};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let pool = Pool::new(Arc::new(MemoryStore::new()), PoolId::from_name("gpus"));
    /// pool.register(2).await?;
    /// let held = pool.borrow(Duration::from_secs(60), Duration::ZERO).await?;
    /// assert!(pool.set_draining(true).await?.draining);
    /// assert!(matches!(
    ///     pool.try_borrow(Duration::from_secs(60)).await,
    ///     Err(Error::Draining { .. })
    /// ));
    /// drop(held); // returns go on while the pool drains
    /// assert_eq!(pool.inspect().await?.in_use, 0);
    /// pool.set_draining(false).await?;
    /// let _again = pool.try_borrow(Duration::from_secs(60)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn set_draining(&self, draining: bool) -> Result<PoolState> {
        let state = self.store().set_draining(self.id(), draining).await;
        if state.is_ok() {
            self.changed();
        }
        if matches!(&state, Ok(state) if state.draining) {
            // This process's borrowers queued behind a head fail now, not
            // once their head has asked the store.
            self.store().changes().found_draining(self.id());
        }
        telemetry::counted(self.name(), state)
    }
}
