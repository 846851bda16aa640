//! The [`Store`] trait: the atomic primitives a storage backend provides
//! (rule "Stores"), and [`InPlace`], the answers an in-process store makes
//! without a future.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::request::{BorrowRequest, TryBorrow, TryBorrowAll};
use crate::wait::Changes;
use crate::{
    clock::Clock, error::Result, id::LeaseId, id::PoolId, id::WaiterId, lease::Holder,
    lease::Lease, lease::PoolState, queued::QueuedPlace, session::Session,
};

/// A storage backend: the atomic primitives behind a [`Pool`](crate::Pool).
///
/// Waiting is the core's: its queue, its timers and the order in which a
/// process's waiters ask the store live once, in
/// [`Pool`](crate::Pool), and users call that, not these methods. Each
/// primitive is one atomic step, and the store decides within it:
/// - an in-process store keeps its slots in the core's [`SlotTable`](crate::store::SlotTable),
///   which picks the slot and judges expiry;
/// - a database store picks the slot and judges expiry in its own atomic
///   step (in SQL), so that processes on other machines agree; its
///   answers are held to the [`SlotTable`](crate::store::SlotTable)'s by the conformance suite's
///   model tests (`store_model!`), and it may keep a queue of heads across
///   processes (see *Queued heads* below).
///
/// Every method is required, on purpose: each store states each one. The
/// synchronous fast paths of an in-process store live apart, in
/// [`InPlace`], reached through [`Store::in_place`].
///
/// # Contract
///
/// - **Atomic.** Each method is one atomic step against the stored state:
///   concurrent calls from any number of tasks, threads and processes sharing
///   the store behave as if run one at a time (R10, R14). A failure leaves
///   nothing half done and is [`Error::Storage`](crate::Error::Storage) with
///   the right `retryable` flag.
/// - **One clock decides** (rule "Time"). No time comes in as an
///   argument: each step reads the clock that decides for everyone sharing
///   the store, inside the step, and judges expiry and sets expiries by
///   that one reading: this process's clock (the one [`Store::clock`]
///   returns) for the memory store, the machine's clock for a SQLite file,
///   the database server's (`clock_timestamp()`) for PostgreSQL. A lease
///   whose expiry is at or before that reading is not active, whether or
///   not it has been cleaned up (R7), and every time a store keeps lies in
///   `UNIX_EPOCH..=`[`max_time`](crate::store::max_time), to whole milliseconds. In test mode a
///   store takes the test's manual clock for its deciding clock, so that
///   expiry is tested without sleeping.
/// - **Lowest free.** A grant of [`BorrowRequest::slots`] `n` takes the
///   `n` positions that [`lowest_free_n`](crate::store::lowest_free_n) names for the active leases (R6),
///   and only while `in_use + n <= count` (R10), where `in_use`
///   counts the slots the active leases hold, not the leases.
/// - **Weighted leases** (R15). A lease of `n` slots has one id, one token
///   and one expiry; a return, renewal, forced return (from any of its
///   positions) or expiry acts on all `n`, and [`Store::holders`] lists it
///   once, by its lowest position, with every position in
///   [`Lease::positions`](crate::Lease::positions).
/// - **Tokens.** Each grant's token is strictly greater than every token
///   the store granted before for that pool id, also across delete and
///   register again (R9). A store-wide counter satisfies this.
/// - **Notify.** The core tells this process's waiters of a register, a
///   drain, a delete, a renewal or a forced return made through a
///   [`Pool`](crate::Pool), once the store's step has returned. A return
///   is the store's to tell of: after committing it, the store hands the
///   slot to this process's head ([`Changes::hand_off`](crate::store::Changes::hand_off),
///   [`Changes::claim_head`](crate::store::Changes::claim_head)) or calls [`Changes::notify`](crate::store::Changes::notify) for the pool.
///   A store also calls `notify` (or [`Changes::notify_all`](crate::store::Changes::notify_all)) for what it
///   learns of other processes' changes: a notification, a poll, the
///   leases of a gone holder it reaped.
/// - **Holders** (R16). A bound lease belongs to its holder's
///   session. A store whose holder is the process (SQLite: a kernel lock
///   that only the process's end releases) records the holder with each
///   lease of a [`BorrowRequest::bound`] request; a networked store records
///   [`BorrowRequest::session`], keeps a record per session with an end on
///   its deciding clock ([`Heartbeat`](crate::store::Heartbeat)), and never binds a lease to a
///   session that has ended. A lease whose holder is gone or whose
///   session's end has passed is not active, in every step (R7 applies to
///   it as to an expiry; a refusal's `next_expiry` counts the sessions'
///   ends). A connection's loss alone ends nothing. A store must never take
///   a live holder for gone: where liveness cannot be told, the lease is
///   left to its ttl. A renewal of a lease whose session has ended fails
///   as for an expired lease. An in-process store may ignore `bound`: its
///   holder is the process, and it dies with it.
/// - **Keys.** A request with a key whose lease is active in the pool is
///   answered with that lease, unchanged, and takes no slot; keys are per
///   pool. A key is free again once its lease is returned or expired.
/// - **Draining.** A borrow of a draining pool fails with
///   [`Error::Draining`](crate::Error::Draining) before anything else is
///   checked but the pool's existence (a keyed retry included), and writes
///   nothing, but for a held place ([`BorrowRequest::hold`]): it takes or
///   keeps its place first, as a refusal would, so that a ticket keeps its
///   turn through a drain (R11; the core leaves the place at once for a
///   poller that does not wait for the drain). A multi-pool borrow naming
///   a draining pool fails whole.
/// - **Unknown pools.** `inspect`, `set_draining`, `try_borrow`,
///   `try_borrow_all`, `renew`, `holders` and `force_return` fail with
///   [`Error::PoolNotFound`](crate::Error::PoolNotFound); `delete` reports
///   `false`; `return_lease` and `unbind` report `false` (R8).
/// - **Queued heads.** A store shared by processes may remember each
///   [`BorrowRequest::waiter`] it answered `Exhausted`, with its number of
///   slots, serve them first come first served, and must forget one on a
///   grant to it, on [`Store::leave_queue`], and when it stops asking (a
///   crashed process). A borrower of `n` is then granted only if `n` slots
///   are free beyond the slots owed to the heads queued ahead of it, each
///   owed its own weight (R11 with weights; the suite's
///   `store_queue_conformance!` (feature `conformance`) checks
///   it). An in-process store may ignore its borrowers' waiters: the
///   core's queue already orders them.
/// - **Held places.** Every store keeps the place of a request with a
///   [`BorrowRequest::hold`] and a `waiter`, a place that no process owns:
///   it lives until `hold` after the latest attempt for it, is never
///   dropped for its asker's death, is never handed a slot by a return,
///   and is served first come, first served with every borrower queued
///   (R11; [`Store::place`] finds it, [`Store::leave_queue`] drops it; the
///   suite's `store_conformance!` checks it). An in-process store keeps
///   them in its [`SlotTable`](crate::store::SlotTable) ([`SlotTable::poll_place`](crate::store::SlotTable::poll_place)), ordered among
///   this process's borrowers by [`Changes::arrival`](crate::store::Changes::arrival).
/// - **No waiting.** No method waits for a slot; waiting is the core's.
/// - **Validation.** Arguments arrive checked and clamped against
///   [`Limits`](crate::Limits); a store need not check them again.
#[async_trait]
pub trait Store: Send + Sync + fmt::Debug + 'static {
    /// The parts every store keeps and the core reads: its clock, change
    /// notification, session, ttl bound and in-place answers, lent as one
    /// value. The one accessor a store writes; [`clock`](Store::clock),
    /// [`changes`](Store::changes), [`session`](Store::session),
    /// [`max_ttl`](Store::max_ttl) and [`in_place`](Store::in_place) read it.
    fn parts(&self) -> Parts<'_>;

    /// The clock all times handed to this store come from, and by which the
    /// core times its waits: the deciding clock itself, or this process's
    /// best view of it (rule "Time"). Every wake re-checks the store, so a
    /// view that is slightly off costs latency, never correctness.
    /// Provided: [`Parts::clock`].
    #[inline]
    fn clock(&self) -> &dyn Clock {
        self.parts().clock
    }

    /// The store's change notification, which holds the in-process wait
    /// queues of its pools. Provided: [`Parts::changes`].
    #[inline]
    fn changes(&self) -> &Changes {
        self.parts().changes
    }

    /// The handle's session (R16), for a store whose bound leases
    /// belong to one: a networked store's, kept by a heartbeat
    /// ([`Session::start`]). `None` for a store whose holder is the process
    /// itself (memory, SQLite). Provided: [`Parts::session`].
    #[inline]
    fn session(&self) -> Option<&Session> {
        self.parts().session
    }

    /// The longest ttl this store can honour ([`Duration::MAX`] when it has
    /// no bound of its own): a store's own limits are limits (R5). A
    /// [`Pool`](crate::Pool) on it reports at most this as
    /// [`Limits::max_ttl`](crate::Limits::max_ttl) and clamps every ttl to
    /// it, so that the lease's expiry says what was granted. The Redis
    /// store's is its restart grace (rule "Restart grace"). Provided:
    /// [`Parts::max_ttl`].
    #[inline]
    fn max_ttl(&self) -> Duration {
        self.parts().max_ttl
    }

    /// The store's liveness bound for a lease that a return handed to a
    /// queued borrower of another process and that its holder holds from
    /// the message's arrival, until its process confirms it (rule "A
    /// handed slot is held on arrival"; at most 1 s): shown as
    /// [`Limits::handed_bound`](crate::Limits::handed_bound). `None`, the
    /// default, for a store that does not hand leases on arrival.
    fn handed_bound(&self) -> Option<Duration> {
        None
    }

    /// The granularity in which the store's deciding clock ends leases,
    /// when coarser than a millisecond (the etcd store's: 1 s, rule
    /// "etcd"): shown as
    /// [`Limits::expiry_granularity`](crate::Limits::expiry_granularity).
    /// `None`, the default, for a store that ends leases to the
    /// millisecond.
    fn expiry_granularity(&self) -> Option<Duration> {
        None
    }

    /// Creates pool `pool` with `count` slots, or sets the count of an
    /// existing one (R2); returns its state as of the step. Revokes no
    /// lease.
    async fn register(&self, pool: PoolId, count: u32) -> Result<PoolState>;

    /// The state of `pool`, as of one instant (R3), `draining` and
    /// `queued` included.
    async fn inspect(&self, pool: PoolId) -> Result<PoolState>;

    /// Starts (`true`) or ends (`false`) the pool's drain and returns its
    /// state: while it drains, `try_borrow` and `try_borrow_all` fail with
    /// [`Error::Draining`](crate::Error::Draining) and grant nothing, and
    /// nothing is handed off; returns, renewals, forced returns and the
    /// count go on. The flag is kept with the pool, so every process that
    /// shares the store sees it; `register` leaves it as it is. Notifies
    /// the pool's waiters either way.
    async fn set_draining(&self, pool: PoolId, draining: bool) -> Result<PoolState>;

    /// A page of the store's pools, in id order ([`PoolId`]'s order: its
    /// UUID's 16 bytes): at most `limit` of them, the first the least id
    /// greater than `after` (the least of all when `None`), each stated
    /// as [`inspect`](Store::inspect) would state it (count, in use,
    /// draining, queued). A page shorter than `limit` is the last. The
    /// page's time grows with `limit`, not with the number of pools the
    /// store holds (rule "Listing pools"): a store keeps its pools indexed
    /// by id. `limit` arrives in `1..=`[`MAX_PAGE`](crate::store::MAX_PAGE).
    /// Each pool's state is of one instant; a pool registered or deleted
    /// while the page is read may or may not be on it.
    async fn pools(&self, after: Option<PoolId>, limit: u32) -> Result<Vec<PoolState>>;

    /// Removes `pool` and all its leases; `true` if it existed (R4). The
    /// store must keep its token counter past the delete (R9).
    async fn delete(&self, pool: PoolId) -> Result<bool>;

    /// Grants the request's number of slots, the lowest free, if
    /// `in_use + slots <= count` (R6, R10, R15), with the request's lease
    /// id, for the request's ttl from the step's reading of the deciding
    /// clock.
    async fn try_borrow(&self, request: &BorrowRequest) -> Result<TryBorrow>;

    /// One atomic step over several pools: grants every request as
    /// [`try_borrow`](Store::try_borrow) would, or none of them if any pool
    /// has no slot for its request. The core names each pool once; a store
    /// given one twice must still grant all or nothing, without panicking. A pool that has none remembers
    /// the request's waiter as `try_borrow` would.
    async fn try_borrow_all(&self, requests: &[BorrowRequest]) -> Result<TryBorrowAll>;

    /// Ends lease `lease` of `pool` if it is active (R8); `true` only if it
    /// was.
    async fn return_lease(&self, pool: PoolId, lease: LeaseId) -> Result<bool>;

    /// [`return_lease`](Store::return_lease) for a caller that holds the
    /// whole lease (a guard does): the same result, for `lease.pool` and
    /// `lease.id`, with the lease's positions at hand, so that a store may
    /// find its rows by position (the SQLite store does) instead of by id.
    /// Provided: `return_lease`, for a store with nothing to gain from them.
    async fn return_held(&self, lease: Lease) -> Result<bool> {
        self.return_lease(lease.pool, lease.id).await
    }

    /// Sets lease `lease` of `pool`, if it is active, to expire `ttl`
    /// (checked and clamped, whole ms) after the step's reading of the
    /// deciding clock, keeping its position, token and labels; the renewed
    /// lease, or `None` if it was not active.
    async fn renew(&self, pool: PoolId, lease: LeaseId, ttl: Duration) -> Result<Option<Lease>>;

    /// Unbinds lease `lease` of `pool` from its holder (R13): if
    /// it is active, it stays active until its expiry whatever becomes of
    /// the process, the store handle or its session; `true` if it was
    /// active. What [`LeaseGuard::forget`](crate::LeaseGuard::forget)
    /// asks. A store whose holder is the process it runs in (memory) only
    /// reports whether the lease is active.
    async fn unbind(&self, pool: PoolId, lease: LeaseId) -> Result<bool>;

    /// Every active lease of `pool`, by position, with its labels, as of
    /// one instant.
    async fn holders(&self, pool: PoolId) -> Result<Vec<Holder>>;

    /// Ends the lease holding `position` of `pool` (any of its positions,
    /// R15) if one is active, as a return would; the lease it ended.
    async fn force_return(&self, pool: PoolId, position: u32) -> Result<Option<Holder>>;

    /// The store's answers made at once, without a future, if it offers
    /// them ([`InPlace`]); `None` for a store that needs I/O for every
    /// step, and the core then awaits [`try_borrow`](Store::try_borrow)
    /// and [`return_held`](Store::return_held). Provided:
    /// [`Parts::in_place`].
    #[inline]
    fn in_place(&self) -> Option<&dyn InPlace> {
        self.parts().in_place
    }

    /// The place of `waiter` in the store's own queue of `pool` (see
    /// *Queued heads* above): 1 for the first, counting every live place
    /// ahead of it (each other process's head, and each held place);
    /// `None` if the store keeps no live place for it: it was granted, left
    /// the queue, was dropped (its hold or ttl passed), or it is a borrower
    /// of an in-process store, whose borrowers are in the core's queue only
    /// (that store still finds its held places). Read-only; a pool that
    /// does not exist has no places.
    async fn place(&self, pool: PoolId, waiter: WaiterId) -> Result<Option<u64>>;

    /// Borrower `waiter` of `pool` stopped waiting without a grant (it timed
    /// out, was dropped or failed): forget any place the store keeps for it
    /// (R12), a held place included.
    async fn leave_queue(&self, pool: PoolId, waiter: WaiterId) -> Result<()>;

    /// The live places of the store's own queue of `pool` (see *Queued
    /// heads* and *Held places* above), in the order they are served: each
    /// with its waiter, weight, the instant it took its place (by the
    /// deciding clock, whole ms) and whether it is a held place
    /// ([`QueuedPlace::kept`](crate::QueuedPlace::kept)). Their number is
    /// [`PoolState::queued`](crate::PoolState::queued). A place a return
    /// handed a slot to (served, not yet taken) is not in line. Read-only;
    /// empty for a pool that does not exist. An in-process store lists its
    /// held places (its borrowers are in the core's queue).
    async fn queue(&self, pool: PoolId) -> Result<Vec<QueuedPlace>>;
}

/// What every [`Store`] keeps and the core reads, lent as one value by
/// [`Store::parts`]: the accessors each store wrote the same way, as one
/// (object_store's rule: a small required core).
///
/// ```
/// # use semaphore_core::store::{Changes, Parts};
/// # use semaphore_core::SystemClock;
/// # use std::time::Duration;
/// // What an in-process store without sessions or in-place answers lends.
/// # let (clock, changes) = (SystemClock, Changes::new());
/// let parts = Parts {
///     clock: &clock,
///     changes: &changes,
///     session: None,
///     max_ttl: Duration::MAX,
///     in_place: None,
/// };
/// # let _ = parts;
/// ```
#[derive(Clone, Copy)]
pub struct Parts<'a> {
    /// The clock all times handed to the store come from
    /// ([`Store::clock`]).
    pub clock: &'a dyn Clock,
    /// The change notification that holds the store's in-process wait
    /// queues ([`Store::changes`]).
    pub changes: &'a Changes,
    /// The handle's session, for a store whose bound leases belong to one
    /// ([`Store::session`]).
    pub session: Option<&'a Session>,
    /// The longest ttl the store can honour ([`Store::max_ttl`]).
    pub max_ttl: Duration,
    /// The store's answers made at once, if it offers them
    /// ([`Store::in_place`]).
    pub in_place: Option<&'a dyn InPlace>,
}

impl fmt::Debug for Parts<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Parts")
            .field("changes", self.changes)
            .field("session", &self.session.is_some())
            .field("max_ttl", &self.max_ttl)
            .field("in_place", &self.in_place.is_some())
            .finish_non_exhaustive()
    }
}

/// A store's answers made at once, without a future: what an in-process
/// store offers through [`Store::in_place`] to save each borrow's boxed
/// future and cancel-safety box (about a fifth of an uncontended borrow and
/// return on the memory store; BENCHMARKS.md line 1).
///
/// Each method gives the answer its [`Store`] counterpart would, under the
/// same contract, and never blocks on I/O or on another task.
pub trait InPlace: Send + Sync {
    /// [`Store::try_borrow`], answered at once.
    fn try_borrow(&self, request: &BorrowRequest) -> Result<TryBorrow>;

    /// [`Store::return_held`], answered at once: the lease, held whole,
    /// found by its position. A guard's return and drop use it to
    /// return its lease in place instead of on a spawned task.
    fn return_held(&self, lease: &Lease) -> Result<bool>;

    /// Answers for `pool` alone, for a [`Pool`](crate::Pool) handle on it to
    /// keep and use instead of this store's: the same answers, to requests
    /// and leases of `pool` only, without looking the pool up each time
    /// (on the memory store, the lookup and the map's lock were 81 of the
    /// 1,813 instructions of an uncontended borrow and return;
    /// BENCHMARKS.md line 1).
    /// It must go on answering as the store does after `pool` is deleted
    /// and registered again. `None` if the store has no such thing, or
    /// `pool` is not registered now: the handle then uses the store and
    /// asks again later.
    fn bind(&self, pool: PoolId) -> Option<Arc<dyn InPlace>>;
}
