//! The wait engine's queues and the store's change notification
//! ([`Changes`]).
//!
//! Each pool with waiters has a FIFO queue in the process. Only the waiter
//! at its head asks the store; the rest wait in memory, which keeps the
//! storage free of herds. [`Changes::notify`] after a change that can let
//! a waiter in wakes exactly the head: the core calls it after the changes
//! made through a pool handle, a store after a return of its own and for
//! what other processes changed. A head that leaves (granted, timed out,
//! failed or dropped) hands the turn to the next.
//!
//! A store whose return runs in this process can do better than wake the
//! head: [`Changes::hand_off`] grants the freed slot to the head inside the
//! return's own atomic step and wakes it with the lease in hand, as tokio's
//! semaphore assigns permits to the waiter it wakes. Nobody can barge in
//! between, and the head need not ask the store again. A store whose
//! return is asynchronous (a database transaction) claims a lease for the
//! queue first ([`Changes::claim_head`]), naming a borrower that then does
//! not ask meanwhile, and delivers the lease to the head once its
//! transaction has committed ([`Claim::deliver`]); every return in flight
//! may hold a claim.
//!
//! A single-pool waiter that asks for more slots than the pool's count is
//! set aside: it keeps its place, but the head is the first
//! waiter not set aside, so it holds back no one. The first waiter set
//! aside is woken by each change to check the count
//! ([`Changes::weigh`]); once the count reaches its weight it is no longer
//! aside and, being ahead of everyone queued after it, is served first.

use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::sync::Mutex;
use tokio::sync::Notify;

use crate::{id::LeaseId, id::PoolId, id::WaiterId};

mod arrivals;
mod claim;
mod contended;
mod hand_off;
#[cfg(semaphore_loom)]
pub mod models;
mod queue;
mod signal;
mod ticket;
pub use claim::Claim;
use queue::{Queue, Waiter};
pub(crate) use ticket::{GiveBack, Ticket, WaiterIdCell};

/// A store's change notification and the in-process wait queues of its pools.
///
/// A store owns one, hands it out through
/// [`Store::changes`](crate::store::Store::changes), and tells it of its returns
/// and of other processes' changes (see [`notify`](Changes::notify)).
/// Everything else about waiting (order, deadlines, timers) is the core's;
/// a store never writes it again.
#[derive(Default)]
pub struct Changes {
    queues: Mutex<foldhash::HashMap<PoolId, Queue>>,
    /// Waiters of all pools, kept beside the map (changed only under its
    /// lock) so that the common case, nobody waiting, costs one atomic load.
    total: AtomicUsize,
    /// The number of waiters that ever joined a queue: each waiter's
    /// sequence number, by which its place is found.
    joined: AtomicU64,
    /// Every change told of, to the borrowers waiting outside the queues
    /// (held places, [`Changes::watch`]); counted in `total` while they wait.
    changed: Notify,
    /// How many wait on `changed`, so that telling them costs one atomic
    /// load when none does.
    watching: AtomicUsize,
    /// The pools whose last borrow here was refused at its first ask
    /// ([`contended`](Changes::contended)).
    refused: Mutex<foldhash::HashSet<PoolId>>,
    /// The conformance suite's gate catches a head's own store call, which
    /// a hand-off would make needless; it turns hand-offs into plain
    /// notifications while armed.
    #[cfg(feature = "conformance")]
    hand_offs_paused: AtomicBool,
    /// The process whose waiters these queues hold: a child that `fork()`
    /// made has a copy of them, whose waiters are not its own.
    process: crate::store::ForkCheck,
}

/// What a queued single-pool borrower asks for, for a store to grant it
/// in a hand-off.
#[derive(Debug)]
pub(crate) struct HandOff {
    /// The id of the lease a hand-off grants: that of the borrow's first
    /// attempt, which was refused if the borrower queued (one random id per
    /// borrow, not two). A [`Claim`]'s lease has an id of its own: it may go
    /// to another borrower.
    pub(crate) lease: LeaseId,
    pub(crate) slots: u32,
    pub(crate) bound: bool,
    pub(crate) ttl: Duration,
    pub(crate) key: Option<Arc<str>>,
    pub(crate) owner: Option<Arc<str>>,
}

impl Changes {
    /// An empty notification with no waiters.
    pub fn new() -> Self {
        Self::default()
    }

    /// Tells the waiters of `pool` that its state changed: a lease was
    /// returned or renewed, its count was set, or it was deleted. Wakes
    /// exactly the head waiter, which re-checks the store; it costs
    /// nothing when nobody waits. The core calls it after the changes a
    /// [`Pool`](crate::Pool) makes but returns; a store, after its returns
    /// and for changes it learns other processes made.
    pub fn notify(&self, pool: PoolId) {
        if !self.has_waiters() {
            return;
        }
        if let Some(queue) = self.queues.lock().get_mut(&pool) {
            queue.told();
        }
        self.tell_watchers();
    }

    /// Tells `pool`'s head, as [`notify`](Changes::notify) does, only if
    /// `waiter` waits on `pool` in this process: for a store whose return
    /// handed a slot to that waiter, which finds its lease at its next
    /// look, while the heads of other processes need not look.
    pub fn notify_waiter(&self, pool: PoolId, waiter: WaiterId) {
        if !self.has_waiters() {
            return;
        }
        let is_here = self
            .queues
            .lock()
            .get(&pool)
            .is_some_and(|queue| queue.waiters.iter().any(|w| w.id.get() == Some(&waiter)));
        if is_here {
            self.notify(pool);
        }
    }

    /// Tells the waiters of every pool that something may have changed, for
    /// a store that learns of another process's change without knowing
    /// which pool it touched.
    pub fn notify_all(&self) {
        for queue in self.queues.lock().values_mut() {
            queue.told();
        }
        self.tell_watchers();
    }

    /// Tells the waiters of each pool `wake` names, as
    /// [`notify`](Changes::notify) does (`wake` is asked of each pool with
    /// waiters here, under this notification's lock: it must not call
    /// back into it): for a store that learns of a change that can let
    /// in the heads of some pools (a session's end frees the leases it
    /// bound, in whatever pools they are) and knows which heads it cannot.
    pub fn notify_where(&self, mut wake: impl FnMut(PoolId) -> bool) {
        if !self.has_waiters() {
            return;
        }
        for (pool, queue) in self.queues.lock().iter_mut() {
            if wake(*pool) {
                queue.told();
            }
        }
        self.tell_watchers();
    }

    /// Wakes the borrowers waiting outside the queues, if any does.
    fn tell_watchers(&self) {
        if self.watching.load(Ordering::Acquire) != 0 {
            self.changed.notify_waiters();
        }
    }

    /// Counts a borrower that waits outside the queues (a held place, which
    /// the store orders) as waiting, so that stores tell of changes, until
    /// the guard is dropped; [`Watch::changed`] completes on the next.
    pub(crate) fn watch(&self) -> Watch<'_> {
        self.total.fetch_add(1, Ordering::AcqRel);
        self.watching.fetch_add(1, Ordering::AcqRel);
        Watch { changes: self }
    }

    /// Whether a store may hand a freed slot to a queued head itself, in
    /// its return: with [`hand_off`](Changes::hand_off), or in its database
    /// (the PostgreSQL store hands a slot to the head of its shared queue).
    /// Always, but while the conformance suite holds heads' own store
    /// calls at its gate, which a hand-off would go around; a store then
    /// only notifies.
    pub fn hand_offs_allowed(&self) -> bool {
        #[cfg(feature = "conformance")]
        if self.hand_offs_paused.load(Ordering::Acquire) {
            return false;
        }
        true
    }

    /// Whether the head of `pool`'s queue has asked the store as the head,
    /// and had its answer: the store's queue then holds its place.
    #[cfg(feature = "conformance")]
    pub(crate) fn head_has_asked(&self, pool: PoolId) -> bool {
        let queues = self.queues.lock();
        queues
            .get(&pool)
            .and_then(|q| q.head())
            .is_some_and(|head| {
                let state = head.state.lock();
                state.asked && !state.asking
            })
    }

    /// Makes [`hand_off`](Changes::hand_off) only wake the head to ask the
    /// store (`true`), or hand over again (`false`).
    #[cfg(feature = "conformance")]
    pub(crate) fn pause_hand_offs(&self, paused: bool) {
        self.hand_offs_paused.store(paused, Ordering::Release);
    }

    /// The head of `pool`'s queue found it draining and waits for the
    /// drain's end, or this process drained it: the borrowers queued
    /// are woken, and those
    /// that do not wait for a drain fail with
    /// [`Error::Draining`](crate::Error::Draining) at once instead of at
    /// the end of their wait (rule "Drain"), as do those that come
    /// until the next change is told of ([`enqueue`](Changes::enqueue)).
    pub(crate) fn found_draining(&self, pool: PoolId) {
        let mut queues = self.queues.lock();
        let Some(queue) = queues.get_mut(&pool) else {
            return;
        };
        queue.draining = true;
        // The head that found the drain waits it out: it does not leave.
        for waiter in &queue.waiters {
            if waiter.leaves_on_drain {
                waiter.state.lock().drained = Some(pool);
                waiter.notify.notify_one();
            }
        }
    }

    /// `Ok` in the process these queues were made in; [`Error::Forked`](crate::Error::Forked)
    /// in a child that `fork()` made of it, whose copy of the queues holds
    /// the parent's waiters: a borrower must not join them (it would wait
    /// behind a waiter that is not there), nor a guard say it holds the
    /// parent's lease (rule "R16 whatever a process's children do").
    pub(crate) fn check_process(&self, operation: &'static str) -> crate::Result<()> {
        self.process.check(operation)
    }

    /// Whether any borrower of any pool waits in this process. A store may
    /// skip telling of changes while it is `false`: a borrower that starts
    /// waiting asks the store first.
    pub fn has_waiters(&self) -> bool {
        self.total.load(Ordering::Acquire) != 0
    }

    /// The number of borrowers of `pool` waiting in this process, a
    /// multi-pool borrower counting once in each of its pools.
    pub fn waiting(&self, pool: PoolId) -> usize {
        if !self.has_waiters() {
            return 0;
        }
        self.queues.lock().get(&pool).map_or(0, |q| q.waiters.len())
    }

    /// Whether a borrower of `pool` that is not set aside waits in this
    /// process: one that a new borrower must queue behind (one set
    /// aside holds back no one).
    #[inline]
    pub(crate) fn holds_back(&self, pool: PoolId) -> bool {
        self.has_waiters() && self.holds_back_queued(pool)
    }

    #[cold]
    fn holds_back_queued(&self, pool: PoolId) -> bool {
        self.queues
            .lock()
            .get(&pool)
            .is_some_and(|q| q.head_index().is_some())
    }

    /// Whether the queued borrower `waiter` of `pool` is not its queue's
    /// head: another is, such as one set aside that a raise of the
    /// count just brought back ahead of it. A store that
    /// grants in place refuses such an attempt, which may have left the
    /// borrower's check of its turn before the raise. `false` if it is not
    /// queued in this process.
    pub fn passed_over(&self, pool: PoolId, waiter: WaiterId) -> bool {
        if !self.has_waiters() {
            return false;
        }
        let queues = self.queues.lock();
        let Some(queue) = queues.get(&pool) else {
            return false;
        };
        let is = |w: &Arc<Waiter>| w.id.get() == Some(&waiter);
        queue.waiters.iter().any(is) && !queue.head().is_some_and(is)
    }

    /// Tells the queue of `pool` its count, as a store or a waiter just
    /// read it: each single-pool waiter for more slots than
    /// `count` is set aside (it keeps its place, but the head is the first
    /// waiter not set aside, so it holds back no one), and each set aside
    /// for no more than `count` takes its place back, ahead of everyone
    /// queued after it. If that changes the head, the new head is woken to
    /// ask the store. A store that holds the count in the step of a change
    /// calls it there (the memory store, when the count is set); the
    /// waiters set aside check the count themselves on each change told of
    /// ([`notify`](Changes::notify)).
    pub fn weigh(&self, pool: PoolId, count: u32) {
        if !self.has_waiters() {
            return;
        }
        if let Some(queue) = self.queues.lock().get_mut(&pool) {
            queue.weigh(count);
        }
    }

    /// What `pool`'s queue learned of it so far ([`News`](queue::News)),
    /// for [`weigh_read`](Changes::weigh_read): read it before reading the
    /// count from the store. `None` if nobody waits on `pool`.
    pub(crate) fn news(&self, pool: PoolId) -> Option<queue::News> {
        self.queues.lock().get(&pool).map(|queue| queue.news)
    }

    /// [`weigh`](Changes::weigh) with a `count` a waiter read from the store
    /// out of any change's step, having seen [`news`](Changes::news) at
    /// `seen` before the read; nothing if the queue learned of a change
    /// meanwhile (a count weighed in its own step, or a change told of,
    /// which wakes the waiters that check the count to read it again), or
    /// is not the queue seen (that one was removed, and the read may be
    /// older than what the new one learned), or if none was seen.
    pub(crate) fn weigh_read(&self, pool: PoolId, count: u32, seen: Option<queue::News>) {
        if let (Some(queue), Some(seen)) = (self.queues.lock().get_mut(&pool), seen) {
            queue.weigh_read(count, seen);
        }
    }

    /// How long the longest-waiting borrower of `pool` in this process has
    /// waited by `now` (the store's clock), `None` if none waits: the wait
    /// of the queue's head, since the queue is first come, first served.
    pub fn longest_wait(&self, pool: PoolId, now: SystemTime) -> Option<Duration> {
        if !self.has_waiters() {
            return None;
        }
        let queues = self.queues.lock();
        let since = queues.get(&pool)?.waiters.front()?.since;
        Some(now.duration_since(since).unwrap_or(Duration::ZERO))
    }

    /// The borrowers of `pool` waiting in this process, in the order they
    /// are served, as places ([`PlaceKind::Here`](crate::PlaceKind::Here)):
    /// their ids in the store's queue once made, weights (one for a
    /// multi-pool borrower) and when they started to wait.
    pub(crate) fn here(&self, pool: PoolId) -> Vec<crate::QueuedPlace> {
        if !self.has_waiters() {
            return Vec::new();
        }
        let queues = self.queues.lock();
        let Some(queue) = queues.get(&pool) else {
            return Vec::new();
        };
        queue
            .waiters
            .iter()
            .map(|w| crate::QueuedPlace {
                waiter: w.id.get().copied(),
                slots: w.request.as_ref().map_or(1, |r| r.slots),
                since: w.since,
                kind: crate::PlaceKind::Here,
            })
            .collect()
    }

    /// Joins the tail of the queue of every pool in `pools`, all under one
    /// lock, so that any two tickets stand in the same order in every queue
    /// they share: no two multi-pool borrowers can each hold the head of a
    /// queue the other needs. A ticket that lands at the head of all its
    /// queues is told at once that it is its turn.
    ///
    /// `since` is when the borrower started to wait, by the store's clock;
    /// `giver` takes back a lease handed to the ticket that nobody took.
    /// `request` (for a single-pool borrower only) lets a store hand it a
    /// slot ([`Changes::hand_off`]); `leaves_on_drain` (a borrower that is
    /// not `wait_while_draining`) has it woken by
    /// [`found_draining`](Changes::found_draining), and does not join (the
    /// `Err` names the pool) while a queue it would join is marked draining.
    pub(crate) fn enqueue<'a>(
        &'a self,
        giver: &'a dyn GiveBack,
        since: SystemTime,
        pools: &'a [PoolId],
        request: Option<HandOff>,
        leaves_on_drain: bool,
    ) -> Result<Ticket<'a>, PoolId> {
        let seq = self.joined.fetch_add(1, Ordering::Relaxed) + 1;
        let waiter = Arc::new(Waiter {
            notify: signal::Signal::default(),
            request: request.filter(|_| pools.len() == 1),
            state: Mutex::default(),
            queued: AtomicBool::new(true),
            since,
            seq,
            leaves_on_drain,
            id: std::sync::OnceLock::new(),
            aside: AtomicBool::new(false),
        });
        let mut queues = self.queues.lock();
        if leaves_on_drain {
            let drains = |pool: &&PoolId| queues.get(*pool).is_some_and(|q| q.draining);
            if let Some(pool) = pools.iter().find(drains) {
                return Err(*pool);
            }
        }
        let mut head_of_all = true;
        for pool in pools {
            let queue = queues.entry(*pool).or_insert_with(|| Queue::made_by(seq));
            queue.join(waiter.clone());
            head_of_all &= queue.head().is_some_and(|head| Arc::ptr_eq(head, &waiter));
        }
        self.total.fetch_add(pools.len(), Ordering::AcqRel);
        if head_of_all {
            waiter.notify.notify_one();
        }
        drop(queues);
        Ok(Ticket {
            changes: self,
            giver,
            pools,
            waiter,
        })
    }
}

/// A borrower waiting outside the queues: see [`Changes::watch`].
pub(crate) struct Watch<'a> {
    changes: &'a Changes,
}

impl Watch<'_> {
    /// Completes on the next change told of any pool
    /// ([`notify`](Changes::notify), [`notify_all`](Changes::notify_all),
    /// a [`hand_off`](Changes::hand_off)), counted from this call: enable
    /// it (`Notified::enable`) before asking the store, so that a change
    /// between the answer and the wait is not missed.
    pub(crate) fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.changes.changed.notified()
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        self.changes.watching.fetch_sub(1, Ordering::AcqRel);
        self.changes.total.fetch_sub(1, Ordering::AcqRel);
    }
}

impl fmt::Debug for Changes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let queues = self.queues.lock();
        let mut map = f.debug_map();
        for (pool, queue) in queues.iter() {
            map.entry(pool, &queue.waiters.len());
        }
        map.finish()
    }
}
