//! The wait engine's queues and the store's change notification
//! ([`Changes`]; SPEC R5, R11, R12).
//!
//! Each pool with waiters has a FIFO queue in the process. Only the waiter
//! at its head asks the store; the rest wait in memory, which keeps the
//! storage free of herds. A store calls [`Changes::notify`] after a change
//! that can let a waiter in; that wakes exactly the head. A head that leaves
//! (granted, timed out, failed or dropped) hands the turn to the next.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::PoolId;

/// A store's change notification and the in-process wait queues of its pools.
///
/// A store owns one, hands it out through
/// [`Store::changes`](crate::Store::changes), and calls
/// [`notify`](Changes::notify) after each committed change that can free a
/// slot. Everything else about waiting (order, deadlines, timers) is the
/// core's; a store never writes it again.
#[derive(Default)]
pub struct Changes {
    queues: Mutex<HashMap<PoolId, Queue>>,
    /// Waiters of all pools, kept beside the map (changed only under its
    /// lock) so that the common case, nobody waiting, costs one atomic load.
    total: AtomicUsize,
}

#[derive(Default)]
struct Queue {
    /// Front is the head: the one waiter allowed to ask the store.
    waiters: VecDeque<Arc<Notify>>,
    /// Bumped by every notify, so a head that leaves can tell whether a
    /// change arrived after its last look at the store.
    version: u64,
}

impl Changes {
    /// An empty notification with no waiters.
    pub fn new() -> Self {
        Self::default()
    }

    /// Tells the waiters of `pool` that its state changed: a lease was
    /// returned, its count was set, or it was deleted. Wakes exactly the head
    /// waiter (R11), which re-checks the store; it costs nothing when nobody
    /// waits.
    pub fn notify(&self, pool: PoolId) {
        if !self.has_waiters() {
            return;
        }
        if let Some(queue) = self.queues.lock().get_mut(&pool) {
            queue.notify_head();
        }
    }

    /// Tells the waiters of every pool that something may have changed, for
    /// a store that learns of another process's change without knowing
    /// which pool it touched.
    pub fn notify_all(&self) {
        for queue in self.queues.lock().values_mut() {
            queue.notify_head();
        }
    }

    /// Whether any borrower of any pool waits in this process. A store may
    /// skip telling of changes while it is `false`: a borrower that starts
    /// waiting asks the store first.
    pub fn has_waiters(&self) -> bool {
        self.total.load(Ordering::Acquire) != 0
    }

    /// The number of borrowers of `pool` waiting in this process.
    pub fn waiting(&self, pool: PoolId) -> usize {
        if !self.has_waiters() {
            return 0;
        }
        self.queues.lock().get(&pool).map_or(0, |q| q.waiters.len())
    }

    /// Joins the tail of `pool`'s queue. A ticket that lands at the head is
    /// told at once that it is its turn.
    pub(crate) fn enqueue(&self, pool: PoolId) -> Ticket<'_> {
        let waiter = Arc::new(Notify::new());
        let mut queues = self.queues.lock();
        let queue = queues.entry(pool).or_default();
        queue.waiters.push_back(waiter.clone());
        self.total.fetch_add(1, Ordering::AcqRel);
        if queue.waiters.len() == 1 {
            waiter.notify_one();
        }
        Ticket {
            changes: self,
            pool,
            seen: queue.version,
            waiter,
            quiet: false,
        }
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

impl Queue {
    fn notify_head(&mut self) {
        self.version += 1;
        if let Some(head) = self.waiters.front() {
            head.notify_one();
        }
    }
}

/// A place in a pool's queue. Dropping it leaves the queue (R12) and, if it
/// was the head, hands the turn on.
pub(crate) struct Ticket<'a> {
    changes: &'a Changes,
    pool: PoolId,
    waiter: Arc<Notify>,
    /// The queue's version when this ticket last asked the store.
    seen: u64,
    /// Leave without waking the next waiter, unless a change came in since
    /// `seen` (set by a grant that left no slot free).
    quiet: bool,
}

impl Ticket<'_> {
    /// Completes when it is this ticket's turn to ask the store: it became
    /// the head, or it is the head and the pool changed. May complete
    /// spuriously; the caller re-checks the store either way.
    pub(crate) async fn turn(&self) {
        self.waiter.notified().await;
    }

    /// Records that the ticket is about to ask the store.
    pub(crate) fn asking(&mut self) {
        if let Some(queue) = self.changes.queues.lock().get(&self.pool) {
            self.seen = queue.version;
        }
    }

    /// Leaves the queue after a grant. The next waiter is woken only if a
    /// slot may be free: the store said so, or a change came in meanwhile.
    pub(crate) fn granted(mut self, more_available: bool) {
        self.quiet = !more_available;
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut queues = self.changes.queues.lock();
        let Some(queue) = queues.get_mut(&self.pool) else {
            return;
        };
        let Some(index) = queue
            .waiters
            .iter()
            .position(|w| Arc::ptr_eq(w, &self.waiter))
        else {
            return;
        };
        queue.waiters.remove(index);
        self.changes.total.fetch_sub(1, Ordering::AcqRel);
        if queue.waiters.is_empty() {
            queues.remove(&self.pool);
        } else if index == 0 && !(self.quiet && queue.version == self.seen) {
            if let Some(head) = queue.waiters.front() {
                head.notify_one();
            }
        }
    }
}
