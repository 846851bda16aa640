//! [`PoolSet`]: one slot from each of several pools, all or nothing
//! (rule "Beyond the basic model").

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use crate::acquire::acquire;
use crate::acquire::keyed_lease;
use crate::cancel::InFlight;
use crate::clock::truncate_ms;
use crate::give_back::return_detached;
use crate::{
    error::Error, error::Result, id::LeaseId, id::PoolId, lease::Lease, limits::Limits,
    options::BorrowOptions, pool::Pool, primitives::Store, request::BorrowRequest,
};

/// Several pools of one store, borrowed from together: one slot of each (or
/// a weight of each, [`PoolSet::weighted`]), all or nothing, under one
/// wait deadline.
///
/// No borrower ever holds some of the slots while waiting for the rest:
/// each attempt grants every slot in one atomic store step or none. So two
/// borrowers asking for the same pools in different orders cannot deadlock
/// (the hold-and-wait condition never arises), and no slot is held by a
/// borrower that has not got them all.
///
/// Fairness: a set borrower queues in every pool's queue at once, in the
/// same order relative to every other waiter, and asks the store when it
/// heads them all. Like tokio's `acquire_many`, it is strictly first
/// come first served: while it waits for one pool, single-pool borrowers
/// queued behind it in the others wait too.
///
/// ```
/// use std::{sync::Arc, time::Duration};
/// use semaphore_memory::{MemoryStore, Pool, PoolId, PoolSet};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), semaphore_memory::Error> {
/// let store = Arc::new(MemoryStore::new());
/// let db = Pool::new(store.clone(), PoolId::from_name("db"));
/// let api = Pool::new(store, PoolId::from_name("api"));
/// db.register(1).await?;
/// api.register(4).await?;
///
/// let both = PoolSet::new([db.clone(), api.clone()])?;
/// let leases = both.borrow(Duration::from_secs(30), Duration::from_secs(5)).await?;
/// assert_eq!(leases.len(), 2); // leases[0] is db's, leases[1] api's
/// assert_eq!(db.inspect().await?.available, 0);
/// drop(leases); // both returned
/// assert_eq!(db.inspect().await?.available, 1);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct PoolSet {
    pools: Vec<Pool>,
    ids: Vec<PoolId>,
    /// Slots per pool, where [`PoolSet::weighted`] set them; else the
    /// borrow's [`BorrowOptions::slots`].
    weights: Vec<Option<u32>>,
    limits: Limits,
}

impl PoolSet {
    /// The set of `pools`, in the order given: the leases come back in that
    /// order. Calls go through the tightest of the handles' [`Limits`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming `pools` if there are none, if the
    /// handles are on different stores (one atomic step needs one store), or
    /// if a pool appears twice.
    pub fn new(pools: impl IntoIterator<Item = Pool>) -> Result<Self> {
        let pools: Vec<Pool> = pools.into_iter().collect();
        let allowed = "one or more handles on one store, each pool once";
        let Some(first) = pools.first() else {
            return Err(Error::invalid("pools", allowed, "no pools"));
        };
        let ids: Vec<PoolId> = pools.iter().map(Pool::id).collect();
        if let Some(other) = pools
            .iter()
            .find(|p| !Arc::ptr_eq(p.store(), first.store()))
        {
            let got = format!(
                "pool {} on another store than pool {}",
                other.id(),
                first.id()
            );
            return Err(Error::invalid("pools", allowed, got));
        }
        if let Some(twice) = ids
            .iter()
            .enumerate()
            .find(|(i, id)| ids[..*i].contains(id))
        {
            return Err(Error::invalid(
                "pools",
                allowed,
                format!("pool {} twice", twice.1),
            ));
        }
        let limits = pools
            .iter()
            .map(|p| *p.limits())
            .fold(*first.limits(), tightest);
        let weights = vec![None; pools.len()];
        Ok(Self {
            pools,
            ids,
            weights,
            limits,
        })
    }

    /// The set of `pools`, each with the number of slots to borrow from it
    /// as one lease: `(gpus, 2), (disk, 1)` borrows two slots of
    /// `gpus` and one of `disk`, all or nothing.
    ///
    /// # Errors
    /// Those of [`new`](PoolSet::new), and [`Error::InvalidArgument`]
    /// naming `slots` for a weight of 0 or above the tightest
    /// [`Limits::max_count`].
    ///
    /// ```
    /// use std::{sync::Arc, time::Duration};
    /// use semaphore_memory::{MemoryStore, Pool, PoolId, PoolSet};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), semaphore_memory::Error> {
    /// let store = Arc::new(MemoryStore::new());
    /// let gpus = Pool::new(store.clone(), PoolId::from_name("gpus"));
    /// let disk = Pool::new(store, PoolId::from_name("disk"));
    /// gpus.register(4).await?;
    /// disk.register(1).await?;
    /// let job = PoolSet::weighted([(gpus.clone(), 2), (disk, 1)])?;
    /// let leases = job.borrow(Duration::from_secs(60), Duration::ZERO).await?;
    /// assert_eq!(&leases[0].positions[..], &[0, 1]);
    /// assert_eq!(gpus.inspect().await?.in_use, 2);
    /// # Ok(()) }
    /// ```
    pub fn weighted(pools: impl IntoIterator<Item = (Pool, u32)>) -> Result<Self> {
        let (pools, weights): (Vec<Pool>, Vec<u32>) = pools.into_iter().unzip();
        let mut set = Self::new(pools)?;
        for &n in &weights {
            set.limits.check_slots(n)?;
        }
        set.weights = weights.into_iter().map(Some).collect();
        Ok(set)
    }

    /// The pools' ids, in order.
    pub fn ids(&self) -> &[PoolId] {
        &self.ids
    }

    /// The handles, in order.
    pub fn pools(&self) -> &[Pool] {
        &self.pools
    }

    /// The limits calls through the set are checked against: for each
    /// field, the tightest of the handles'.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    fn store(&self) -> &Arc<dyn Store> {
        self.pools[0].store()
    }

    /// Borrows one slot of every pool (its weight, for a set made with
    /// [`weighted`](PoolSet::weighted)), all or nothing, each for `ttl`,
    /// waiting up to `wait` in all; the leases are returned when the
    /// [`LeaseSet`] drops. `ttl` and `wait` are checked and clamped as
    /// for [`Pool::borrow`].
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] naming `ttl` if it is zero.
    /// - [`Error::PoolNotFound`] naming the first unknown pool, at once.
    /// - [`Error::Exhausted`] naming the first pool if the slots were not all
    ///   free together within `wait`.
    /// - [`Error::NoRuntime`] if it must wait outside a tokio runtime (see
    ///   [`Pool`'s runtime notes](crate::Pool#runtime)).
    /// - [`Error::Storage`] if the store failed; nothing is held.
    ///
    /// # Cancel safety
    /// Cancel safe: dropped while it waits, it takes nothing and
    /// leaves every queue; if the store had granted when it was dropped, the
    /// leases are returned at once.
    pub async fn borrow(&self, ttl: Duration, wait: Duration) -> Result<LeaseSet> {
        self.borrow_with(ttl, wait, BorrowOptions::new()).await
    }

    /// [`borrow`](PoolSet::borrow) with an owner label and an idempotency
    /// key, applied in every pool: while the key's leases are active in
    /// every pool, a retry returns those same leases. The options' number
    /// of slots is taken from each pool that
    /// [`weighted`](PoolSet::weighted) gave no weight.
    ///
    /// # Errors
    /// Those of [`borrow`](PoolSet::borrow), and those of
    /// [`Pool::borrow_with`] for the options.
    ///
    /// # Cancel safety
    /// As [`borrow`](PoolSet::borrow). A dropped retry never returns the
    /// keyed leases it was answered with: they are the first borrow's.
    pub async fn borrow_with(
        &self,
        ttl: Duration,
        wait: Duration,
        options: BorrowOptions,
    ) -> Result<LeaseSet> {
        let ttl = self.limits.clamp_ttl(ttl)?;
        let wait = self.limits.clamp_wait(wait);
        let labels = options.check(&self.limits)?;
        let store = self.store();
        let start = truncate_ms(store.clock().now());
        if let Some(key) = &labels.key
            && self.ids.iter().any(|id| store.changes().waiting(*id) > 0)
            && let Some(leases) = self.keyed(key).await?
        {
            return Ok(LeaseSet::new(self.clone(), leases));
        }
        let exhausted = || Error::Exhausted {
            pool: self.ids[0],
            waited: wait,
        };
        let mut last: Vec<LeaseId> = Vec::new();
        let leases = acquire(crate::acquire::Borrowing {
            store,
            pools: &self.ids,
            start,
            wait,
            handoff: None,
            draining_waits: labels.wait_while_draining,
            first: crate::acquire::First::Ask,
            exhausted,
            attempt: |_now: std::time::SystemTime,
                      waiter: Option<crate::id::WaiterId>,
                      again: bool| {
                // After an attempt whose answer was lost, its ids again.
                if !again {
                    last = self.ids.iter().map(|_| LeaseId::new()).collect();
                }
                let session = crate::pool::bind(store, labels.bound);
                let requests = self
                    .ids
                    .iter()
                    .zip(&self.weights)
                    .zip(&last)
                    .map(|((id, weight), lease)| {
                        let mut request = BorrowRequest::new(*id, *lease, ttl);
                        request.slots = weight.unwrap_or(labels.slots);
                        request.bound = labels.bound;
                        request.session = session;
                        request.retried = again;
                        request.waiter = waiter;
                        request.key.clone_from(&labels.key);
                        request.owner.clone_from(&labels.owner);
                        request
                    })
                    .collect();
                InFlight::all(store, requests)
            },
        })
        .await?;
        Ok(LeaseSet::new(self.clone(), leases))
    }

    /// The active leases with key `key`, if every pool has one.
    async fn keyed(&self, key: &str) -> Result<Option<Vec<Lease>>> {
        let mut leases = Vec::with_capacity(self.ids.len());
        for id in &self.ids {
            match keyed_lease(self.store(), *id, key).await? {
                Some(lease) => leases.push(lease),
                None => return Ok(None),
            }
        }
        Ok(Some(leases))
    }
}

fn tightest(a: Limits, b: Limits) -> Limits {
    Limits {
        max_count: a.max_count.min(b.max_count),
        max_ttl: a.max_ttl.min(b.max_ttl),
        max_wait: a.max_wait.min(b.max_wait),
        max_owner_len: a.max_owner_len.min(b.max_owner_len),
        max_key_len: a.max_key_len.min(b.max_key_len),
        handed_bound: a.handed_bound.max(b.handed_bound),
        expiry_granularity: a.expiry_granularity.max(b.expiry_granularity),
    }
}

/// The leases of one [`PoolSet::borrow`], one per pool in the set's order,
/// all returned when it is dropped. Derefs to `[Lease]`.
#[must_use = "dropping the set returns every lease at once"]
pub struct LeaseSet {
    set: PoolSet,
    leases: Vec<Lease>,
    armed: bool,
}

impl LeaseSet {
    fn new(set: PoolSet, leases: Vec<Lease>) -> Self {
        Self {
            set,
            leases,
            armed: true,
        }
    }

    /// The leases, one per pool, in the set's order.
    pub fn leases(&self) -> &[Lease] {
        &self.leases
    }

    /// The set the leases came from.
    pub fn pool_set(&self) -> &PoolSet {
        &self.set
    }

    /// Returns every lease now; `true` only if all were still active.
    ///
    /// # Errors
    /// [`Error::Storage`] if the store failed; the leases not yet returned
    /// are left to their ttl.
    ///
    /// # Cancel safety
    /// Dropping the future may leave some leases returned and the others
    /// to their ttl: the set is consumed either way.
    pub async fn release(mut self) -> Result<bool> {
        self.armed = false;
        let mut all = true;
        for (pool, lease) in self.set.pools.iter().zip(&self.leases) {
            all &= pool.return_held(lease).await?;
        }
        Ok(all)
    }

    /// Keeps the leases until their ttl instead of returning them on drop,
    /// and hands them back, unbound from their holder (as
    /// [`LeaseGuard::forget`](crate::LeaseGuard::forget)): they live to
    /// their ttl whatever becomes of this process, the store handle or its
    /// session.
    pub fn forget(mut self) -> Vec<Lease> {
        self.armed = false;
        let leases = std::mem::take(&mut self.leases);
        for lease in &leases {
            crate::give_back::unbind_detached(self.set.store(), lease);
        }
        leases.into_iter().map(|l| l.with_session(None)).collect()
    }
}

impl Deref for LeaseSet {
    type Target = [Lease];

    fn deref(&self) -> &[Lease] {
        &self.leases
    }
}

impl fmt::Debug for LeaseSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseSet")
            .field("leases", &self.leases)
            .field("armed", &self.armed)
            .finish()
    }
}

impl Drop for LeaseSet {
    fn drop(&mut self) {
        if self.armed {
            for lease in &self.leases {
                return_detached(self.set.store(), lease);
            }
        }
    }
}
