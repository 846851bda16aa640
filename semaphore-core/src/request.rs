//! One borrow attempt as the core hands it to a store, and the store's
//! answers ([`Store::try_borrow`](crate::store::Store::try_borrow), [`Store::try_borrow_all`](crate::store::Store::try_borrow_all)).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::clock::MAX_UNIX_MS;
use crate::{id::LeaseId, id::PoolId, id::SessionId, id::WaiterId, lease::Lease};

/// One borrow attempt, as the core hands it to [`Store::try_borrow`](crate::store::Store::try_borrow).
///
/// It carries no time: the store reads its deciding clock inside its atomic
/// step (rule "Time": this process's for the memory store, the machine's
/// for SQLite, the server's for PostgreSQL) and grants for [`ttl`](Self::ttl)
/// from that reading.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BorrowRequest {
    /// The pool to borrow from.
    pub pool: PoolId,
    /// The id the lease gets if granted, made by the core beforehand so that
    /// a cancelled call can still return it.
    pub lease: LeaseId,
    /// How long the lease is held if granted: checked and clamped by the
    /// core, whole milliseconds, and at most [`MAX_UNIX_MS`](crate::store::MAX_UNIX_MS) ms, so
    /// that the deciding clock's reading plus it fits every store's time
    /// column. The expiry is that sum, saturating at [`max_time`](crate::store::max_time).
    pub ttl: Duration,
    /// How many slots to grant as one lease: at least 1, checked by
    /// the core against [`Limits::max_count`](crate::Limits::max_count).
    /// A grant takes the `slots` lowest free positions, only while
    /// `in_use + slots <= count`.
    pub slots: u32,
    /// Whether the lease is bound to its holder's liveness (default
    /// `true`): a store that can see its holder die (a process, a session,
    /// a connection) records the holder with the lease and treats the
    /// lease as expired once the holder is gone; a store that cannot, or
    /// an unbound request, leaves the lease to its ttl.
    pub bound: bool,
    /// The session a bound lease belongs to, for a store that has sessions
    /// ([`Store::session`](crate::store::Store::session)): the one open when the borrow
    /// started (or, after it ended, when the attempt was made). `None` for
    /// an unbound request, a store without sessions, or while no session is
    /// open; such a lease is left to its ttl. A store that has sessions
    /// binds the lease to this one, never to another, and grants nothing
    /// bound to a session that has ended (it fails the attempt with a
    /// retryable [`Error::Storage`](crate::Error::Storage) instead), so
    /// that no lease is born dead.
    pub session: Option<SessionId>,
    /// Set when the attempt repeats one whose answer was lost (it failed
    /// with a storage error, so it may have been granted), under the same
    /// lease id (rule "Lost replies"): a store that may lose answers (a
    /// networked one) then first looks for an active lease with this id in
    /// the pool, and answers it as it stands if there is one. A store may
    /// also look on every attempt.
    pub retried: bool,
    /// Set when the attempt comes from the head of this process's queue
    /// for the pool (a borrow that may wait on a pool contended here queues
    /// before its first attempt), `None` for a first attempt that queued
    /// behind no one.
    /// A store shared by processes may keep the heads it has seen in a queue
    /// of its own and grant to a newcomer only when free slots outnumber
    /// them; an in-process store ignores it.
    pub waiter: Option<WaiterId>,
    /// How long the store keeps `waiter`'s place (see *Queued heads* and
    /// *Held places* on [`Store`](crate::store::Store)) after this attempt, if it is
    /// refused: `None` (the default) for the store's own waiter ttl, with
    /// the place bound to this process as any head's. `Some(hold)` for a
    /// place that outlives its asker: a ticket that any process sharing the
    /// store may poll ([`HeldPlace::wait`](crate::HeldPlace::wait)). Such
    /// a place is bound to no process, lives until `hold` after the
    /// latest attempt made for it (each refused attempt moves its end to
    /// the step's reading of the clock plus `hold`), and is never handed
    /// a slot by a return: only an attempt made for it is granted. At most
    /// [`MAX_UNIX_MS`](crate::store::MAX_UNIX_MS) ms, whole milliseconds. The core sets it only on a
    /// single-pool attempt ([`Store::try_borrow`](crate::store::Store::try_borrow)) that names a `waiter`
    /// and a `key`. Every store honours it, an in-process store included.
    pub hold: Option<Duration>,
    /// The idempotency key, checked, as the store keeps it: the caller's
    /// key, then [`KEY_DIGEST_SEPARATOR`](crate::store::KEY_DIGEST_SEPARATOR) and the request's digest if it
    /// has one ([`stored_key`](crate::store::stored_key)). Keys match by their name ([`key_name`](crate::store::key_name)):
    /// while a lease granted under the same name is active in the pool,
    /// the store answers with that lease if its stored key is this one,
    /// and fails with [`Error::KeyReused`](crate::Error::KeyReused) if not
    /// (another request's digest), whether or not a slot is free, in the
    /// step that would have granted (rule "Idempotency keys
    /// are atomic").
    pub key: Option<Arc<str>>,
    /// The owner label, checked; kept with the lease for
    /// [`Store::holders`](crate::store::Store::holders).
    pub owner: Option<Arc<str>>,
}

impl BorrowRequest {
    /// A request for one slot of pool `pool`, granting lease `lease` for
    /// `ttl` (capped at [`MAX_UNIX_MS`](crate::store::MAX_UNIX_MS) ms).
    pub fn new(pool: PoolId, lease: LeaseId, ttl: Duration) -> Self {
        Self {
            pool,
            lease,
            ttl: ttl.min(Duration::from_millis(MAX_UNIX_MS)),
            slots: 1,
            bound: true,
            session: None,
            retried: false,
            waiter: None,
            hold: None,
            key: None,
            owner: None,
        }
    }
}

/// The answer of [`Store::try_borrow`](crate::store::Store::try_borrow) for a pool that exists.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum TryBorrow {
    /// A slot was granted, or the request's key named a lease still active,
    /// which is answered as it stands.
    Granted {
        /// The lease: new (its id is the request's), or the keyed one.
        lease: Lease,
    },
    /// `in_use + slots > count`, or heads queued ahead of the borrower are
    /// owed the free slots: nothing was changed.
    Exhausted {
        /// The earliest expiry among the pool's active leases, so that the
        /// waiter sleeps exactly until then; `None` if no lease is active
        /// (count is 0, or was lowered).
        next_expiry: Option<SystemTime>,
    },
}

/// The answer of [`Store::try_borrow_all`](crate::store::Store::try_borrow_all): all granted or none.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum TryBorrowAll {
    /// Every request was granted (or answered with its keyed lease), in the
    /// order of the requests.
    Granted {
        /// One lease per request.
        leases: Vec<Lease>,
    },
    /// At least one pool had no slot for its request: nothing was granted.
    Exhausted {
        /// When the pools that were full may all have a slot again by
        /// expiry alone: the latest of their earliest expiries; `None` if one
        /// of them has no active lease.
        next_expiry: Option<SystemTime>,
    },
}

impl TryBorrowAll {
    /// The refusal of a multi-pool attempt whose full pools had these
    /// earliest expiries (`None` for a pool with no active lease): the
    /// latest of them, since every full pool needs a slot at once, or
    /// `None` if any is `None`.
    pub fn refused(earliest: impl IntoIterator<Item = Option<SystemTime>>) -> Self {
        let mut latest = None;
        for at in earliest {
            let Some(at) = at else {
                return TryBorrowAll::Exhausted { next_expiry: None };
            };
            latest = latest.max(Some(at));
        }
        TryBorrowAll::Exhausted {
            next_expiry: latest,
        }
    }
}
