//! Arrivals: where a borrower stands in this process's order of arrival,
//! for an in-process store that keeps held places and serves each in its
//! turn among this process's queued borrowers.

use crate::sync::Ordering;
use std::sync::Arc;

use super::Changes;
use super::queue::Waiter;
use crate::{id::PoolId, id::WaiterId};

impl Changes {
    /// A number above the arrival of every borrower queued in this process
    /// so far, and below that of every one queued later: the arrival of a
    /// held place that an in-process store keeps
    /// ([`SlotTable::poll_place`](crate::store::SlotTable::poll_place)), to
    /// serve it in its turn among this process's borrowers.
    pub fn arrival(&self) -> u64 {
        self.joined.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The arrival of borrower `waiter` queued on `pool` in this process
    /// (the number [`arrival`](Changes::arrival) orders held places by),
    /// or `None` if it is not queued here.
    pub fn arrival_of(&self, pool: PoolId, waiter: WaiterId) -> Option<u64> {
        if !self.has_waiters() {
            return None;
        }
        let queues = self.queues.lock();
        let queue = queues.get(&pool)?;
        let is = |w: &&Arc<Waiter>| w.id.get() == Some(&waiter);
        queue.waiters.iter().find(is).map(|w| w.seq)
    }

    /// The borrowers of `pool` queued in this process before `arrival` that
    /// are not set aside: how many, and the slots they ask
    /// for (one for a multi-pool borrower). What an in-process store's
    /// held place that came at `arrival` waits behind.
    pub fn ahead_of(&self, pool: PoolId, arrival: u64) -> (usize, u32) {
        if !self.has_waiters() {
            return (0, 0);
        }
        let queues = self.queues.lock();
        let Some(queue) = queues.get(&pool) else {
            return (0, 0);
        };
        queue
            .waiters
            .iter()
            .filter(|w| w.seq < arrival && !w.is_aside())
            .fold((0, 0), |(n, slots), w| {
                let asked = w.request.as_ref().map_or(1, |r| r.slots);
                (n + 1, slots.saturating_add(asked))
            })
    }
}
