//! [`Pool`]'s view of its waiters in this process: how many, and how long
//! the longest has waited (the queue, as an operator watches it).

use std::time::Duration;

use crate::pool::Pool;
use crate::{error::Result, queued::QueuedPlace};

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

    /// Everyone known to wait for this pool, in line: this process's
    /// borrowers ([`PlaceKind::Here`](crate::PlaceKind::Here)), and the
    /// places the store keeps for others ([`Store::queue`](crate::store::Store::queue)):
    /// held places (HTTP tickets) and other processes' queued heads (more
    /// of a process's borrowers may wait behind its head, in its memory).
    /// Sorted by when each took its place, first come first. What an
    /// operator's view lists (`semaphore status`, the service's page); one
    /// call of the store.
    ///
    /// # Errors
    /// [`Error::Storage`](crate::Error::Storage) if the store failed.
    ///
    /// # Cancel safety
    /// Safe: it only reads.
    pub async fn queue(&self) -> Result<Vec<QueuedPlace>> {
        let changes = self.store.changes();
        // This process's borrowers before and after the store's answer:
        // one may take its place in the store meanwhile (its id made just
        // then), or leave the queue here (granted) while the store still
        // shows it; either is ours, not another process's.
        let before = changes.here(self.id);
        let kept = self.store.queue(self.id).await?;
        Ok(merged(before, changes.here(self.id), kept))
    }

    /// [`waiting`](Pool::waiting), with the places the store keeps for
    /// others, as of `state` (this pool's, just inspected): every borrower
    /// known to wait, and how long the longest of them has waited by `now`.
    /// Asks the store for its places only if `state` says it keeps any.
    ///
    /// # Errors
    /// [`Error::Storage`](crate::Error::Storage) if the store failed.
    pub async fn waiting_everywhere(
        &self,
        state: &crate::PoolState,
        now: std::time::SystemTime,
    ) -> Result<Waiting> {
        if state.queued == 0 {
            return Ok(self.waiting());
        }
        let places = self.queue().await?;
        let longest = places
            .iter()
            .map(|p| now.duration_since(p.since).unwrap_or(Duration::ZERO))
            .max();
        Ok(Waiting {
            count: places.len(),
            longest,
        })
    }
}

/// This process's borrowers `here` and the store's places `kept`, the
/// latter but those of borrowers here now or `before`, sorted by when each
/// took its place (stable: each list is in the order it is served; at the
/// same instant, the store's places first).
fn merged(
    before: Vec<QueuedPlace>,
    here: Vec<QueuedPlace>,
    kept: Vec<QueuedPlace>,
) -> Vec<QueuedPlace> {
    let ours: Vec<_> = before
        .iter()
        .chain(&here)
        .filter_map(|p| p.waiter)
        .collect();
    let mut all: Vec<QueuedPlace> = kept
        .into_iter()
        .filter(|p| !p.waiter.is_some_and(|w| ours.contains(&w)))
        .collect();
    all.extend(here);
    all.sort_by_key(|p| p.since);
    all
}
