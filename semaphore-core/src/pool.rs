//! [`Pool`]: the handle users call (SPEC R2-R13).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::cancel::{InFlight, QueuePlace};
use crate::clock::truncate_ms;
use crate::{
    BorrowRequest, Error, Lease, LeaseGuard, LeaseId, Limits, OwnedLeaseGuard, PoolId, PoolState,
    Result, Store, TryBorrow, WaiterId,
};

/// A handle on one pool of a store: register, inspect, delete, borrow and
/// return.
///
/// Cheap to clone (an `Arc` and two small values). Handles on the same pool
/// id of the same store share one wait queue, wherever they were made.
///
/// ```
/// use std::{sync::Arc, time::Duration};
/// use semaphore_memory::{MemoryStore, Pool, PoolId};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), semaphore_memory::Error> {
/// let pool = Pool::new(Arc::new(MemoryStore::new()), PoolId::from_name("upstream"));
/// pool.register(2).await?;
///
/// let lease = pool.borrow(Duration::from_secs(30), Duration::from_secs(5)).await?;
/// assert_eq!(lease.position, 0);
/// assert_eq!(pool.inspect().await?.available, 1);
/// drop(lease); // returned at once
/// assert_eq!(pool.inspect().await?.available, 2);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Pool {
    store: Arc<dyn Store>,
    id: PoolId,
    limits: Limits,
}

impl AsRef<Pool> for Pool {
    fn as_ref(&self) -> &Pool {
        self
    }
}

impl Pool {
    /// A handle on pool `id` of `store`, with [`Limits::default`]. Makes no
    /// call to the store: the pool exists once [`register`](Pool::register)
    /// has run, here or in any process sharing the store.
    pub fn new(store: Arc<dyn Store>, id: PoolId) -> Self {
        Self {
            store,
            id,
            limits: Limits::default(),
        }
    }

    /// The same handle with other [`Limits`] for the calls made through it.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The pool's id.
    pub fn id(&self) -> PoolId {
        self.id
    }

    /// The limits this handle checks and clamps against.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The store behind the handle.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The number of borrowers waiting on this pool in this process.
    pub fn waiting(&self) -> usize {
        self.store.changes().waiting(self.id)
    }

    fn now(&self) -> SystemTime {
        truncate_ms(self.store.clock().now())
    }

    /// Creates the pool with `count` slots, or sets the count of an existing
    /// one (R2); returns its state. Idempotent. Raising the count wakes
    /// waiters at once; lowering it below `in_use` revokes nothing and only
    /// withholds new grants (positions at or above the new count are not
    /// handed out, R6).
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] naming `count` if it is above
    ///   [`Limits::max_count`] (default 1000); nothing changes.
    /// - [`Error::Storage`] if the store failed; nothing changes.
    ///
    /// # Cancel safety
    /// Dropping the future may or may not leave the count set; it is never
    /// half set.
    pub async fn register(&self, count: u32) -> Result<PoolState> {
        let count = self.limits.check_count(count)?;
        self.store.register(self.id, count, self.now()).await
    }

    /// The pool's `{id, count, in_use, available}` as of one instant (R3).
    /// Expired leases never count (R7). Never shows lease ids.
    ///
    /// # Errors
    /// [`Error::PoolNotFound`] for an unregistered or deleted pool;
    /// [`Error::Storage`] if the store failed.
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    pub async fn inspect(&self) -> Result<PoolState> {
        self.store.inspect(self.id, self.now()).await
    }

    /// Removes the pool and all its leases (R4); `true` if it existed.
    /// Idempotent. Borrowers waiting on it fail with
    /// [`Error::PoolNotFound`] at once; its lease ids stop being valid.
    /// Tokens keep growing if it is registered again (R9).
    ///
    /// # Errors
    /// [`Error::Storage`] if the store failed; nothing was removed.
    ///
    /// # Cancel safety
    /// Dropping the future may or may not leave the pool deleted; it is
    /// never half deleted.
    pub async fn delete(&self) -> Result<bool> {
        self.store.delete(self.id).await
    }

    /// Borrows the lowest free slot for `ttl`, waiting up to `wait` for one
    /// to free up (R5, R6, R11); the lease is returned when the guard drops
    /// (R13).
    ///
    /// `ttl` must be above zero; it is clamped to [`Limits::max_ttl`] and
    /// rounded up to whole milliseconds. `wait` is clamped to
    /// [`Limits::max_wait`]; zero means fail at once if no slot is free.
    /// The grant is immediate if a slot is free and no earlier borrower in
    /// this process is still waiting. Otherwise the borrower queues, first
    /// come first served (R11), and is woken the instant a lease is returned,
    /// the count is raised, or the earliest lease expires.
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] naming `ttl` if it is zero.
    /// - [`Error::PoolNotFound`] at once for an unknown pool, whatever
    ///   `wait` is, and at once for waiters when the pool is deleted (R4).
    /// - [`Error::Exhausted`] if no slot freed up within `wait`.
    /// - [`Error::Storage`] if the store failed.
    ///
    /// # Cancel safety
    /// Cancel safe (R12). Dropping the future while it waits takes nothing
    /// and leaves the queue, letting the next waiter in. If the store
    /// had already granted when the future was dropped, the lease is returned
    /// at once, not left to its ttl.
    pub async fn borrow(&self, ttl: Duration, wait: Duration) -> Result<LeaseGuard<&Pool>> {
        let lease = self.acquire(ttl, wait).await?;
        Ok(LeaseGuard::new(self, lease))
    }

    /// [`borrow`](Pool::borrow), with a guard that owns a clone of this
    /// handle, for `'static` tasks. Same errors and cancel safety.
    pub async fn borrow_owned(&self, ttl: Duration, wait: Duration) -> Result<OwnedLeaseGuard> {
        let lease = self.acquire(ttl, wait).await?;
        Ok(LeaseGuard::new(self.clone(), lease))
    }

    /// [`borrow`](Pool::borrow) with a zero wait: a free slot or
    /// [`Error::Exhausted`] at once. Same errors and cancel safety.
    pub async fn try_borrow(&self, ttl: Duration) -> Result<LeaseGuard<&Pool>> {
        self.borrow(ttl, Duration::ZERO).await
    }

    /// Returns lease `lease` early (R8): frees its slot at once and wakes the
    /// head waiter. `true` only if the lease was active; an unknown, returned,
    /// expired or deleted lease reports `false`, never an error.
    ///
    /// # Errors
    /// [`Error::Storage`] if the store failed; the lease is then unchanged.
    ///
    /// # Cancel safety
    /// Dropping the future may or may not leave the lease returned; either
    /// way it frees itself at its ttl at the latest.
    pub async fn return_lease(&self, lease: LeaseId) -> Result<bool> {
        self.store.return_lease(self.id, lease, self.now()).await
    }

    async fn acquire(&self, ttl: Duration, wait: Duration) -> Result<Lease> {
        let ttl = self.limits.clamp_ttl(ttl)?;
        let wait = self.limits.clamp_wait(wait);
        let exhausted = || Error::Exhausted {
            pool: self.id,
            waited: wait,
        };
        let changes = self.store.changes();
        let start = self.now();
        let deadline = start + wait;

        // Fast path: nobody is queued, so asking the store jumps no one.
        if changes.waiting(self.id) == 0 {
            if let TryBorrow::Granted { lease, .. } = self.attempt_at(start, ttl, None).await? {
                return Ok(lease);
            }
        }
        if wait.is_zero() {
            return Err(exhausted());
        }

        let clock = self.store.clock();
        let mut ticket = changes.enqueue(self.id);
        let place = QueuePlace::new(&self.store, self.id);
        let mut timeout = clock.sleep_until(deadline);
        let mut next_expiry = None;
        loop {
            tokio::select! {
                biased;
                () = ticket.turn() => {}
                () = async {
                    match next_expiry.as_mut() {
                        Some(expiry) => expiry.await,
                        None => std::future::pending().await,
                    }
                } => {}
                () = &mut timeout => return Err(exhausted()),
            }
            ticket.asking();
            match self.attempt(ttl, Some(place.waiter)).await? {
                TryBorrow::Granted {
                    lease,
                    more_available,
                } => {
                    ticket.granted(more_available);
                    place.granted();
                    return Ok(lease);
                }
                TryBorrow::Exhausted { next_expiry: at } => {
                    next_expiry = at.map(|at| clock.sleep_until(at));
                }
            }
        }
    }

    /// One atomic try at the store, with a fresh lease id; cancel safe.
    fn attempt(&self, ttl: Duration, waiter: Option<WaiterId>) -> InFlight {
        self.attempt_at(self.now(), ttl, waiter)
    }

    fn attempt_at(&self, now: SystemTime, ttl: Duration, waiter: Option<WaiterId>) -> InFlight {
        let mut request = BorrowRequest::new(self.id, LeaseId::new(), now, now + ttl);
        request.waiter = waiter;
        InFlight::new(&self.store, request)
    }
}
