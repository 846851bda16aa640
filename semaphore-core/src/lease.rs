//! What the operations hand back: [`Lease`] (with its [`Positions`]) and
//! [`PoolState`].

use std::time::{Duration, SystemTime};

pub use crate::positions::Positions;
use crate::{id::LeaseId, id::PoolId, id::SessionId};

/// One or more held slots of one pool (rule "Words").
///
/// A lease is *active* from its grant until the earlier of its return and
/// `expires_at`. Its `id` is the credential that returns it early, so
/// keep it private. A weighted borrow holds several positions under
/// one id, one token and one expiry: returning, renewing, forcing or
/// expiring the lease acts on all of them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct Lease {
    /// The lease's own random id (UUID v4), made by the library.
    pub id: LeaseId,
    /// The pool the slot belongs to.
    pub pool: PoolId,
    /// The lowest of [`positions`](Self::positions): the slot's number for
    /// a lease of one slot, `0..count` at the time of the grant, the lowest
    /// that was free.
    pub position: u32,
    /// Every position the lease holds, lowest first: the `n` lowest free
    /// at the grant for a borrow of `n` slots; one for a plain
    /// borrow.
    pub positions: Positions,
    /// The fencing token: strictly greater than every token granted before
    /// for this pool id in this store. Pass it to the resource you
    /// protect, which should reject writes carrying a smaller token than it
    /// has seen (Kleppmann, "How to do distributed locking", 2016).
    pub token: u64,
    /// When the lease frees itself, in wall-clock time, to whole
    /// milliseconds.
    pub expires_at: SystemTime,
    /// The session the lease is bound to, on a store whose
    /// bound leases belong to its handle's session (the networked ones):
    /// the lease is active only while that session lives. `None` for an
    /// unbound lease and on stores whose holder is the process itself
    /// (memory, SQLite), in the admin listing
    /// ([`Pool::holders`](crate::Pool::holders)), and once
    /// [`LeaseGuard::forget`](crate::LeaseGuard::forget) unbinds it.
    pub session: Option<SessionId>,
}

impl Lease {
    /// Builds a lease of one slot; for stores reading one back from
    /// storage.
    pub fn new(
        id: LeaseId,
        pool: PoolId,
        position: u32,
        token: u64,
        expires_at: SystemTime,
    ) -> Self {
        Self::holding(id, pool, Positions::one(position), token, expires_at)
    }

    /// Builds a lease of the slots at `positions`; for stores reading
    /// one back from storage.
    #[inline]
    pub fn holding(
        id: LeaseId,
        pool: PoolId,
        positions: Positions,
        token: u64,
        expires_at: SystemTime,
    ) -> Self {
        Self {
            id,
            pool,
            position: positions.lowest(),
            positions,
            token,
            expires_at,
            session: None,
        }
    }

    /// This lease, bound to `session`; for stores reading one back.
    pub fn with_session(mut self, session: Option<SessionId>) -> Self {
        self.session = session;
        self
    }

    /// The number of slots the lease holds: `n` for a borrow of `n`.
    pub fn slots(&self) -> u32 {
        self.positions.len() as u32
    }

    /// How long the lease has left at `now`; zero once it has expired.
    /// [`LeaseGuard::time_left`](crate::LeaseGuard::time_left) asks the
    /// store's clock for `now`.
    pub fn time_left(&self, now: SystemTime) -> Duration {
        self.expires_at
            .duration_since(now)
            .unwrap_or(Duration::ZERO)
    }
}

/// A pool as of one instant. It never shows lease ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct PoolState {
    /// The pool.
    pub id: PoolId,
    /// Its number of slots, `0..=max_count`.
    pub count: u32,
    /// Slots held by active leases (expired ones never count): a lease
    /// of `n` slots counts `n`. May exceed `count` after `count` was
    /// lowered.
    pub in_use: u32,
    /// `count.saturating_sub(in_use)`.
    pub available: u32,
    /// Whether the pool is draining: it grants nothing new until an operator
    /// sets it back, and returns and renewals go on
    /// ([`Pool::set_draining`](crate::Pool::set_draining)).
    pub draining: bool,
    /// The places in the store's own queue of the pool at that instant
    /// ([`Store::queue`](crate::store::Store::queue)): each held place (an
    /// HTTP ticket) and, on a store shared by processes, each process's
    /// queued head. A process's other waiters wait in its memory:
    /// [`Pool::waiting`](crate::Pool::waiting) counts this process's, and
    /// [`Pool::queue`](crate::Pool::queue) lists everyone known to wait.
    pub queued: u32,
}

impl PoolState {
    /// The state of pool `id` with `count` slots and `in_use` active leases;
    /// `available` is derived.
    pub fn new(id: PoolId, count: u32, in_use: u32) -> Self {
        Self {
            id,
            count,
            in_use,
            available: count.saturating_sub(in_use),
            draining: false,
            queued: 0,
        }
    }

    /// This state with the pool draining (`true`) or not; for stores.
    pub fn with_draining(mut self, draining: bool) -> Self {
        self.draining = draining;
        self
    }

    /// This state with `queued` places in the store's queue; for stores.
    pub fn with_queued(mut self, queued: u32) -> Self {
        self.queued = queued;
        self
    }
}

/// One active lease as the admin listing shows it
/// ([`Pool::holders`](crate::Pool::holders)): the lease, id included, and
/// the labels it was borrowed with.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct Holder {
    /// The lease. Its `id` is the credential that returns it: the listing is
    /// an admin's tool.
    pub lease: Lease,
    /// The owner label given at borrow, if any.
    pub owner: Option<String>,
    /// The idempotency key given at borrow, if any.
    pub key: Option<String>,
}

impl Holder {
    /// A holder of `lease` with the given labels; for stores.
    pub fn new(lease: Lease, owner: Option<String>, key: Option<String>) -> Self {
        Self { lease, owner, key }
    }
}
