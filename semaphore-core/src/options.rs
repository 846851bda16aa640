//! [`BorrowOptions`]: what a borrow may carry besides its ttl and wait.

use std::sync::Arc;

use crate::{error::Result, limits::Limits};

/// Optional parts of a borrow: the number of slots, an idempotency
/// key and an owner label (rule "Beyond the basic model"). Pass them to
/// [`Pool::borrow_with`](crate::Pool::borrow_with) or
/// [`PoolSet::borrow_with`](crate::PoolSet::borrow_with).
///
/// ```
/// use semaphore_core::BorrowOptions;
///
/// let options = BorrowOptions::new().slots(2).key("invoice-7731").owner("worker-3");
/// assert_eq!(options.key.as_deref(), Some("invoice-7731"));
/// assert_eq!(options.slots, 2);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BorrowOptions {
    /// How many slots the lease holds: 1 (the default) to
    /// [`Limits::max_count`]. The lease holds the `slots` lowest free
    /// positions under one id, token and expiry. A borrower of several
    /// slots at the head of the queue is not overtaken by later ones,
    /// smaller or larger. With a [`PoolSet`](crate::PoolSet), the
    /// weight of every pool that [`PoolSet::weighted`](crate::PoolSet::weighted)
    /// did not set.
    pub slots: u32,
    /// The idempotency key. While the lease granted for a key is active, a
    /// borrow on the same pool with the same key returns that same lease
    /// (same id, position, token and expiry) and takes no second slot; once
    /// it is returned or expired, the key may be granted anew. This is how a
    /// caller retries safely after a timeout or a crash between grant and
    /// reply (as Stripe's idempotency keys make a retried charge safe).
    /// 1 to [`Limits::max_key_len`] bytes (default 255), no control, format,
    /// line or paragraph separator characters. Keys are per pool.
    pub key: Option<String>,
    /// A digest of the request the key is used for (any 128 bits the
    /// caller derives from what it asks: a hash of a request body), stored
    /// with the key in the step that grants. A borrow with the same key and
    /// the same digest gets the same lease; one with another digest (or
    /// none, where the lease has one) is refused with
    /// [`Error::KeyReused`](crate::Error::KeyReused) in that same step,
    /// however many processes race (rule "Idempotency keys are
    /// atomic"; the IETF idempotency-key draft's 422). Ignored without a
    /// key.
    pub request_digest: Option<u128>,
    /// A label saying who holds the lease (a host and process, a job id),
    /// shown by [`Pool::holders`](crate::Pool::holders). 1 to
    /// [`Limits::max_owner_len`] bytes (default 64), no control, format,
    /// line or paragraph separator characters.
    pub owner: Option<String>,
    /// Whether the lease is bound to its holder's liveness: `true`
    /// (the default) frees it as soon as its holder is gone, before its
    /// ttl, the next time any process looks at the pool. The holder is
    /// what the store can see die: this process for a SQLite file (a
    /// kernel lock it holds), the store's listening session for
    /// PostgreSQL, its connection for Redis; nothing for the memory store,
    /// which dies with the process. Liveness only ever shortens a lease: a
    /// live holder never loses one through it, and the ttl still bounds
    /// it. Set `false` for a lease handed to another process to hold (the
    /// HTTP service and `semaphore borrow` do), which must outlive this
    /// one.
    pub bound: bool,
    /// Whether a borrow of a draining pool waits for the drain to end
    /// (`true`), within its wait, or fails with
    /// [`Error::Draining`](crate::Error::Draining) at once (`false`, the
    /// default). Either way it grants nothing while the pool drains.
    pub wait_while_draining: bool,
}

impl Default for BorrowOptions {
    fn default() -> Self {
        Self {
            slots: 1,
            key: None,
            request_digest: None,
            owner: None,
            bound: true,
            wait_while_draining: false,
        }
    }
}

impl BorrowOptions {
    /// One slot, no key, no owner label: a plain borrow.
    pub fn new() -> Self {
        Self::default()
    }

    /// These options for `slots` slots in one lease: the `slots`
    /// lowest free positions, under one lease id, one fencing token and
    /// one expiry, granted once that many are free at once. Returning,
    /// renewing, forcing or expiring the lease acts on all of them; it
    /// counts `slots` in `in_use`. A borrow checks it: 0 or above
    /// [`Limits::max_count`] fails with
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) naming
    /// `slots`, and nothing changes.
    ///
    /// Fairness is tokio's `acquire_many`'s: a borrower of several slots
    /// at the head of the queue is not overtaken by later borrowers,
    /// smaller or larger, while it waits, in this process and across
    /// the processes sharing a store. A weight above the pool's current
    /// count waits for the count to be raised, keeping its place
    /// without holding back anyone behind it meanwhile; once the count
    /// reaches it, it is served before those queued after it. (A
    /// multi-pool borrow's head, [`PoolSet`](crate::PoolSet), holds back its
    /// queues as before.) A dropped weighted borrow takes nothing and lets
    /// the smaller borrowers behind it move up.
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use semaphore_memory::{BorrowOptions, MemoryStore, Pool, PoolId};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), semaphore_memory::Error> {
    /// let gpus = Pool::new(Arc::new(MemoryStore::new()), PoolId::from_name("gpus"));
    /// gpus.register(4).await?;
    /// let one = gpus.borrow(Duration::from_secs(60), Duration::ZERO).await?;
    /// // A 2-GPU job: the two lowest free positions, one lease.
    /// let two_gpus = BorrowOptions::new().slots(2);
    /// let two = gpus.borrow_with(Duration::from_secs(60), Duration::from_secs(5), two_gpus).await?;
    /// assert_eq!(&two.positions[..], &[1, 2]);
    /// assert_eq!(gpus.inspect().await?.in_use, 3);
    /// drop(two); // both slots come back at once
    /// assert_eq!(gpus.inspect().await?.in_use, 1);
    /// # drop(one);
    /// # Ok(()) }
    /// ```
    pub fn slots(mut self, slots: u32) -> Self {
        self.slots = slots;
        self
    }

    /// These options with the lease bound to its holder's liveness (`true`,
    /// the default) or not (`false`, for a lease handed to another
    /// process).
    pub fn bound(mut self, bound: bool) -> Self {
        self.bound = bound;
        self
    }

    /// These options waiting while the pool drains (`true`) instead of
    /// failing with [`Error::Draining`](crate::Error::Draining) at once.
    pub fn wait_while_draining(mut self, wait: bool) -> Self {
        self.wait_while_draining = wait;
        self
    }

    /// These options with idempotency key `key`.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// These options with request digest `digest` for their key
    /// ([`BorrowOptions::request_digest`]).
    pub fn request_digest(mut self, digest: u128) -> Self {
        self.request_digest = Some(digest);
        self
    }

    /// These options with owner label `owner`.
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// Checks the number of slots ([`Limits::check_slots`]) and both labels
    /// against `limits`: each label 1 to its maximum number of
    /// bytes ([`Limits::max_key_len`], [`Limits::max_owner_len`]), with no
    /// control, format, line or paragraph separator character (Unicode
    /// categories Cc, Cf, Zl, Zp), so that a label prints as it reads on
    /// one line. Borrows call it; a store borrowing by another
    /// path (a caller-owned transaction) calls it too.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) naming
    /// `slots`, `key` or `owner`, with the allowed range.
    pub fn validate(&self, limits: &Limits) -> Result<()> {
        self.check(limits).map(drop)
    }

    /// Checks the weight and both labels against `limits`.
    pub(crate) fn check(&self, limits: &Limits) -> Result<Labels> {
        let slots = limits.check_slots(self.slots)?;
        if let Some(key) = &self.key {
            Limits::check_label("key", key, limits.max_key_len)?;
        }
        if let Some(owner) = &self.owner {
            Limits::check_label("owner", owner, limits.max_owner_len)?;
        }
        Ok(Labels {
            slots,
            bound: self.bound,
            wait_while_draining: self.wait_while_draining,
            key: self
                .key
                .as_deref()
                .map(|key| crate::keys::stored_key(key, self.request_digest)),
            owner: self.owner.as_deref().map(Arc::from),
        })
    }
}

/// Checked options, cheap to copy into every attempt of a borrow.
#[derive(Debug, Clone)]
pub(crate) struct Labels {
    pub(crate) slots: u32,
    pub(crate) bound: bool,
    pub(crate) wait_while_draining: bool,
    pub(crate) key: Option<Arc<str>>,
    pub(crate) owner: Option<Arc<str>>,
}

impl Default for Labels {
    fn default() -> Self {
        Self {
            slots: 1,
            bound: true,
            wait_while_draining: false,
            key: None,
            owner: None,
        }
    }
}
