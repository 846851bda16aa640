//! [`Pool`]: the handle users call.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::acquire::{First, acquire, keyed_lease};
use crate::cancel::InFlight;
use crate::clock::truncate_ms;
use crate::options::Labels;
use crate::telemetry::{self, Name};
use crate::wait::HandOff;

mod admin;
mod drain;
mod held;
mod leases;
mod waiters;
use crate::{
    BorrowOptions, BorrowRequest, Error, Lease, LeaseGuard, LeaseId, Limits, OwnedLeaseGuard,
    PoolId, Result, Store,
};
pub use held::{HELD_POLL_INTERVAL, HeldPlace};
pub use leases::Renewing;
pub use waiters::Waiting;

/// The session a bound request names: the one open now on a store with
/// sessions, `None` otherwise.
pub(crate) fn bind(store: &Arc<dyn Store>, bound: bool) -> Option<crate::SessionId> {
    if !bound {
        return None;
    }
    store.session().and_then(crate::Session::current)
}

/// What the common path of a borrow found ([`Pool::grant_in_place`]).
enum InPlace {
    /// A free slot, granted.
    Granted(Lease),
    /// Not granted: the full path follows, told what was found.
    Not(First),
}

/// A handle on one pool of a store: register, inspect, delete, borrow and
/// return.
///
/// Cheap to clone (two `Arc`s and a few small values). Handles on the same pool
/// id of the same store share one wait queue, wherever they were made.
///
/// # Runtime
/// Waiting needs a tokio runtime with its timer enabled: a borrow that
/// must wait, called outside one, fails with [`Error::NoRuntime`] and holds
/// nothing. Every other call needs what its store needs and no more: the
/// memory and SQLite stores answer on any executor, or none (SQLite then
/// runs its statement in place on the calling thread); a networked store
/// needs the runtime its driver runs on.
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
    name: Name,
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
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use semaphore_memory::{MemoryStore, Pool, PoolId};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), semaphore_memory::Error> {
    /// let store = Arc::new(MemoryStore::new());
    /// // Every handle that names "gpus", in any task, means the same pool.
    /// let pool = Pool::new(store, PoolId::from_name("gpus"));
    /// assert_eq!(pool.id(), PoolId::from_name("gpus"));
    /// # Ok(()) }
    /// ```
    pub fn new(store: Arc<dyn Store>, id: PoolId) -> Self {
        let limits = Limits::default().within(&*store);
        Self {
            store,
            id,
            limits,
            name: Name::hashed(id),
        }
    }

    /// The same handle, named `alias` in traces and metrics (the `tracing`
    /// and `metrics` features) instead of by a hash of its id: a name for
    /// people, such as `"gpus"`. The id itself never appears there, since it
    /// may be a secret, unless it is made the alias. Changes nothing else.
    pub fn with_alias(mut self, alias: impl Into<Arc<str>>) -> Self {
        self.name = Name::alias(&alias.into());
        self
    }

    pub(crate) fn name(&self) -> &Name {
        &self.name
    }

    /// The same handle with other [`Limits`] for the calls made through
    /// it; a `max_ttl` above the store's own
    /// ([`Store::max_ttl`](crate::store::Store::max_ttl)) is lowered to it.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits.within(&*self.store);
        self
    }

    /// The pool's id.
    pub fn id(&self) -> PoolId {
        self.id
    }

    /// The limits this handle checks and clamps against: never a `max_ttl`
    /// above the store's own.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The store behind the handle.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub(crate) fn now(&self) -> SystemTime {
        truncate_ms(self.store.clock().now())
    }

    /// Tells this process's waiters of the pool that a call through this
    /// handle changed it (a renewal, a forced return, a count, a drain, a
    /// delete): the core does it once here, after the store's step
    /// committed, so that no store writes it again
    /// ([`Changes::notify`](crate::store::Changes::notify)). A return is
    /// the store's to tell of: it may hand the slot over in its own step.
    pub(crate) fn changed(&self) {
        self.store.changes().notify(self.id);
    }

    /// Borrows the lowest free slot for `ttl`, waiting up to `wait` for one
    /// to free up; the lease is returned when the guard drops.
    ///
    /// `ttl` must be above zero; it is clamped to [`Limits::max_ttl`] and
    /// rounded up to whole milliseconds. `wait` is clamped to
    /// [`Limits::max_wait`]; zero means fail at once if no slot is free.
    /// Expiries and deadlines saturate at [`max_time`](crate::store::max_time),
    /// so no limit, however high, makes one overflow or wrap.
    /// The grant is immediate if a slot is free and no earlier borrower in
    /// this process is still waiting. Otherwise the borrower queues, first
    /// come first served, and is woken the instant a lease is returned,
    /// the count is raised, or the earliest lease expires.
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] naming `ttl` if it is zero.
    /// - [`Error::PoolNotFound`] at once for an unknown pool, whatever
    ///   `wait` is, and at once for waiters when the pool is deleted.
    /// - [`Error::Exhausted`] if no slot freed up within `wait`.
    /// - [`Error::NoRuntime`] if it must wait outside a tokio runtime (see
    ///   [Runtime](Pool#runtime)).
    /// - [`Error::Storage`] if the store failed: at once on the first
    ///   attempt, or if not retryable; a retryable failure while waiting (a
    ///   lost connection, a busy file) is retried with backoff until `wait`
    ///   runs out, and then returned instead of [`Error::Exhausted`].
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
        let (lease, ttl) = self.acquire(ttl, wait, Labels::default()).await?;
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
        let (lease, ttl) = self.acquire(ttl, wait, Labels::default()).await?;
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
    /// Those of [`borrow`](Pool::borrow), and [`Error::InvalidArgument`]
    /// naming `key` or `owner` for a label that is empty, longer than
    /// [`Limits::max_key_len`] or [`Limits::max_owner_len`] bytes, or holds a
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
        let (lease, ttl) = self.acquire(ttl, wait, labels).await?;
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
        let (lease, ttl) = self.acquire(ttl, wait, labels).await?;
        Ok(LeaseGuard::new(self.clone(), lease, ttl))
    }

    /// [`borrow`](Pool::borrow) with a zero wait: a free slot or
    /// [`Error::Exhausted`] at once.
    ///
    /// # Errors
    /// Those of [`borrow`](Pool::borrow); [`Error::Exhausted`] whenever no
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

    /// The lease, and its ttl as clamped; traced and counted.
    ///
    /// This and [`acquire_clamped`](Pool::acquire_clamped) return async
    /// blocks, not async fns: an async fn's future keeps each argument
    /// twice, and these are inside every borrow's future.
    #[allow(clippy::manual_async_fn)] // on purpose: see `acquire`
    fn acquire(
        &self,
        ttl: Duration,
        wait: Duration,
        labels: Labels,
    ) -> impl Future<Output = Result<(Lease, Duration)>> {
        async move {
            let ttl = self.limits.clamp_ttl(ttl)?;
            let wait = self.limits.clamp_wait(wait);
            let borrow = telemetry::Borrow::start(&self.name, ttl, wait);
            // The first attempt's lease id, in place or on the full path.
            let first = LeaseId::new();
            let result = match self.grant_in_place(first, ttl, &labels) {
                InPlace::Granted(lease) => Ok(lease),
                // Boxed: the slow path's state is large, and the common
                // path should not carry (and copy) it in its future.
                InPlace::Not(found) => {
                    let slow = self.acquire_clamped(first, ttl, wait, labels, found);
                    borrow.run(Box::pin(slow)).await
                }
            };
            borrow.finish(&result);
            result.map(|lease| (lease, ttl))
        }
    }

    /// The common path (a free slot, nobody queued ahead in this
    /// process): one attempt made in place, by a store that answers
    /// without I/O ([`Store::in_place`]), for a plain borrow (no key:
    /// a keyed one may find its lease behind a queue). `None` if the store
    /// cannot answer in place, someone is queued on the pool here, or the
    /// pool has no free slot now: the borrow then takes the full path,
    /// which waits (and asks again unless it was refused here). Nothing is
    /// in flight in between, so a grant here cannot be left to nobody.
    fn grant_in_place(&self, lease: LeaseId, ttl: Duration, labels: &Labels) -> InPlace {
        if labels.key.is_some() {
            return InPlace::Not(First::Ask);
        }
        if self.store.changes().holds_back(self.id) {
            return InPlace::Not(First::HeldBack);
        }
        let mut request = BorrowRequest::new(self.id, lease, ttl);
        request.slots = labels.slots;
        request.bound = labels.bound;
        request.session = bind(&self.store, labels.bound);
        request.owner.clone_from(&labels.owner);
        if crate::cancel::unsessioned(&self.store, &request).is_some() {
            return InPlace::Not(First::Ask);
        }
        // An error (a drain the borrower may wait out, a missing pool) is
        // the full path's to answer: it asks again.
        match self.store.in_place().map(|s| s.try_borrow(&request)) {
            Some(Ok(crate::store::TryBorrow::Granted { lease })) => InPlace::Granted(lease),
            Some(Ok(crate::store::TryBorrow::Exhausted { .. })) => InPlace::Not(First::Refused),
            _ => InPlace::Not(First::Ask),
        }
    }

    /// The lease, for a `ttl` and `wait` already clamped; `first` is the
    /// lease id of the first attempt (one made in place that was refused
    /// granted nothing under it).
    #[allow(clippy::manual_async_fn)] // on purpose: see `acquire`
    fn acquire_clamped(
        &self,
        first: LeaseId,
        ttl: Duration,
        wait: Duration,
        labels: Labels,
        found: First,
    ) -> impl Future<Output = Result<Lease>> {
        async move {
            // Only the deadline counts from it: no need for whole milliseconds.
            let start = self.store.clock().now();
            if let Some(key) = &labels.key {
                // A keyed retry must not queue behind others for a lease it
                // holds; with nobody queued, the first attempt finds it anyway.
                if self.store.changes().waiting(self.id) > 0
                    && let Some(lease) = keyed_lease(&self.store, self.id, key).await?
                {
                    return Ok(lease);
                }
            }
            let exhausted = || Error::Exhausted {
                pool: self.id,
                waited: wait,
            };
            let mut last = first;
            acquire(
                &self.store,
                std::slice::from_ref(&self.id),
                start,
                wait,
                Some(HandOff {
                    lease: first,
                    slots: labels.slots,
                    bound: labels.bound,
                    ttl,
                    key: labels.key.clone(),
                    owner: labels.owner.clone(),
                }),
                labels.wait_while_draining,
                found,
                exhausted,
                |_now, waiter, again| {
                    // Only the first attempt, made before queueing, is made
                    // without a waiter: a hand-off reuses its id, so it must be
                    // the one attempt that can never have been granted then.
                    // An attempt after one whose answer was lost asks under
                    // its id, so that the store answers what it granted.
                    let lease = if waiter.is_none() {
                        first
                    } else if again {
                        last
                    } else {
                        LeaseId::new()
                    };
                    last = lease;
                    let mut request = BorrowRequest::new(self.id, lease, ttl);
                    request.slots = labels.slots;
                    request.bound = labels.bound;
                    request.session = bind(&self.store, labels.bound);
                    request.retried = again && waiter.is_some();
                    request.waiter = waiter;
                    request.key.clone_from(&labels.key);
                    request.owner.clone_from(&labels.owner);
                    InFlight::one(&self.store, request)
                },
            )
            .await
        }
    }
}
