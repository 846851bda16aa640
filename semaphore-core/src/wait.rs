//! The wait engine's queues and the store's change notification
//! ([`Changes`]; SPEC R5, R11, R12).
//!
//! Each pool with waiters has a FIFO queue in the process. Only the waiter
//! at its head asks the store; the rest wait in memory, which keeps the
//! storage free of herds. A store calls [`Changes::notify`] after a change
//! that can let a waiter in; that wakes exactly the head. A head that leaves
//! (granted, timed out, failed or dropped) hands the turn to the next.

use std::collections::VecDeque;
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
    queues: Mutex<foldhash::HashMap<PoolId, Queue>>,
    /// Waiters of all pools, kept beside the map (changed only under its
    /// lock) so that the common case, nobody waiting, costs one atomic load.
    total: AtomicUsize,
}

#[derive(Default)]
struct Queue {
    /// Front is the head: the one waiter allowed to ask the store.
    waiters: VecDeque<Arc<Notify>>,
}

impl Changes {
    /// An empty notification with no waiters.
    pub fn new() -> Self {
        Self::default()
    }

    /// Tells the waiters of `pool` that its state changed: a lease was
    /// returned or renewed, its count was set, or it was deleted. Wakes
    /// exactly the head waiter (R11), which re-checks the store; it costs
    /// nothing when nobody waits.
    pub fn notify(&self, pool: PoolId) {
        if !self.has_waiters() {
            return;
        }
        if let Some(queue) = self.queues.lock().get(&pool) {
            queue.notify_head();
        }
    }

    /// Tells the waiters of every pool that something may have changed, for
    /// a store that learns of another process's change without knowing
    /// which pool it touched.
    pub fn notify_all(&self) {
        for queue in self.queues.lock().values() {
            queue.notify_head();
        }
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

    /// Joins the tail of the queue of every pool in `pools`, all under one
    /// lock, so that any two tickets stand in the same order in every queue
    /// they share: no two multi-pool borrowers can each hold the head of a
    /// queue the other needs. A ticket that lands at the head of all its
    /// queues is told at once that it is its turn.
    pub(crate) fn enqueue(&self, pools: &[PoolId]) -> Ticket<'_> {
        let waiter = Arc::new(Notify::new());
        let mut queues = self.queues.lock();
        let mut head_of_all = true;
        for pool in pools {
            let queue = queues.entry(*pool).or_default();
            queue.waiters.push_back(waiter.clone());
            head_of_all &= queue.waiters.len() == 1;
        }
        self.total.fetch_add(pools.len(), Ordering::AcqRel);
        if head_of_all {
            waiter.notify_one();
        }
        Ticket {
            changes: self,
            pools: pools.to_vec(),
            waiter,
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
    fn notify_head(&self) {
        if let Some(head) = self.waiters.front() {
            head.notify_one();
        }
    }
}

/// A place in the queue of one or more pools. Dropping it leaves them all
/// (R12) and hands the turn on in each queue it headed.
pub(crate) struct Ticket<'a> {
    changes: &'a Changes,
    pools: Vec<PoolId>,
    waiter: Arc<Notify>,
}

impl Ticket<'_> {
    /// Completes when this ticket may have its turn: it became the head of
    /// one of its queues, or heads one and that pool changed. May complete
    /// spuriously; the caller checks [`Ticket::is_head`] and the store.
    pub(crate) async fn turn(&self) {
        self.waiter.notified().await;
    }

    /// Whether the ticket heads every queue it is in, and so may ask the
    /// store. Always true for a ticket on one pool when its turn came.
    pub(crate) fn is_head(&self) -> bool {
        if self.pools.len() == 1 {
            return true;
        }
        let queues = self.changes.queues.lock();
        self.pools.iter().all(|pool| {
            queues
                .get(pool)
                .and_then(|q| q.waiters.front())
                .is_some_and(|w| Arc::ptr_eq(w, &self.waiter))
        })
    }
}

impl Drop for Ticket<'_> {
    /// Leaves every queue. The next head of each queue this ticket headed is
    /// always woken, even after a grant that left no slot free: it asks the
    /// store once, which tells it when the earliest lease expires (without
    /// that it would sleep past an expiry, R5).
    fn drop(&mut self) {
        let mut queues = self.changes.queues.lock();
        for pool in &self.pools {
            let Some(queue) = queues.get_mut(pool) else {
                continue;
            };
            let Some(index) = queue
                .waiters
                .iter()
                .position(|w| Arc::ptr_eq(w, &self.waiter))
            else {
                continue;
            };
            queue.waiters.remove(index);
            self.changes.total.fetch_sub(1, Ordering::AcqRel);
            if queue.waiters.is_empty() {
                queues.remove(pool);
            } else if index == 0 {
                queue.notify_head();
            }
        }
    }
}
