//! A queued borrower's side of the wait queues: its [`Ticket`] (its turn,
//! a lease handed to it, leaving on drop) and its id in the
//! store's queue.

use crate::sync::Ordering;
use std::sync::Arc;
use std::time::SystemTime;

use super::{Changes, Waiter};
use crate::{id::PoolId, id::WaiterId, lease::Lease};

/// Where a [`Ticket`] gives back a lease handed to it that nobody took:
/// the store, without waiting for the answer (`give_back`).
pub(crate) trait GiveBack: Sync {
    /// Returns `lease` in the background, or in place.
    fn give_back(&self, lease: &Lease);
}

/// A queued borrower's id in the store's queue, made on first use by its
/// attempts or by a return that claims it.
pub(crate) struct WaiterIdCell(Arc<Waiter>);

impl WaiterIdCell {
    pub(crate) fn get_or_make(&self) -> WaiterId {
        *self.0.id.get_or_init(WaiterId::new)
    }

    pub(crate) fn made(&self) -> Option<WaiterId> {
        self.0.id.get().copied()
    }
}

/// A place in the queue of one or more pools. Dropping it leaves them all
/// and hands the turn on in each queue it headed.
pub(crate) struct Ticket<'a> {
    pub(super) changes: &'a Changes,
    pub(super) giver: &'a dyn GiveBack,
    pub(super) pools: &'a [PoolId],
    pub(super) waiter: Arc<Waiter>,
}

impl Ticket<'_> {
    /// Completes when this ticket may have its turn: it became the head of
    /// one of its queues, or heads one and that pool changed. May complete
    /// spuriously; the caller checks [`Ticket::is_head`] and the store.
    pub(crate) async fn turn(&self) {
        self.waiter.notify.notified().await;
    }

    /// The lease a hand-off granted this ticket, if one did; the ticket is
    /// then out of its queue.
    pub(crate) fn take_lease(&self) -> Option<Lease> {
        self.waiter.state.lock().lease.take()
    }

    /// The pool whose queue's head found it draining, if one did since
    /// this ticket joined ([`Changes::found_draining`]).
    pub(crate) fn take_drained(&self) -> Option<PoolId> {
        self.waiter.state.lock().drained.take()
    }

    /// The ticket's id in the store's queue, shared with its queue place.
    pub(crate) fn id(&self) -> WaiterIdCell {
        WaiterIdCell(self.waiter.clone())
    }

    /// Marks a store call of the ticket's own as in flight, unless a return
    /// claimed it or handed it a lease (then `false`: it must not ask; a
    /// claim wakes it, a handed lease is for [`take_lease`](Ticket::take_lease)).
    pub(crate) fn start_asking(&self) -> bool {
        let mut state = self.waiter.state.lock();
        if state.claimed || state.lease.is_some() {
            return false;
        }
        state.asking = true;
        state.asked = true;
        true
    }

    /// Marks the borrow's first ask, made from its place before it is
    /// queued in the store (so with no waiter id), as its own call in
    /// flight: as [`start_asking`](Ticket::start_asking), on a ticket just
    /// made, which nothing can have claimed or handed a lease yet.
    pub(crate) fn start_first_ask(&self) {
        self.waiter.state.lock().asking = true;
    }

    /// The store call of [`start_asking`](Ticket::start_asking) or
    /// [`start_first_ask`](Ticket::start_first_ask) ended.
    pub(crate) fn done_asking(&self) {
        self.waiter.state.lock().asking = false;
    }

    /// Whether the lease a claim delivered to this ticket may have left a
    /// place of its in the store's queue, which its queue place must then
    /// leave (it must not call `QueuePlace::granted`).
    pub(crate) fn place_left(&self) -> bool {
        self.waiter.state.lock().leave_place
    }

    /// The earliest expiry a hand-off that left the pool full told this
    /// ticket of, as its new head, if no change came since.
    pub(crate) fn take_next_expiry(&self) -> Option<Option<SystemTime>> {
        self.waiter.state.lock().next_expiry.take()
    }

    /// Leaves every queue the ticket is still in, waking the next head of
    /// each it headed.
    fn leave_queues(&mut self) {
        if !self.waiter.queued.load(Ordering::Acquire) {
            return;
        }
        let mut queues = self.changes.queues.lock();
        for pool in self.pools {
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
            let headed = queue.head_index() == Some(index);
            queue.waiters.remove(index);
            self.changes.total.fetch_sub(1, Ordering::AcqRel);
            if queue.waiters.is_empty() {
                queues.remove(pool);
            } else if headed {
                queue.notify_head();
            }
        }
    }

    /// Whether the ticket heads every queue it is in, and so may ask the
    /// store: it is the first waiter of each not set aside.
    pub(crate) fn is_head(&self) -> bool {
        let queues = self.changes.queues.lock();
        self.pools.iter().all(|pool| {
            queues
                .get(pool)
                .and_then(|q| q.head())
                .is_some_and(|w| Arc::ptr_eq(w, &self.waiter))
        })
    }

    /// Whether the ticket is set aside: it asks for more slots than its
    /// pool's count when last weighed ([`Changes::weigh`]).
    pub(crate) fn is_aside(&self) -> bool {
        self.waiter.is_aside()
    }
}

impl Drop for Ticket<'_> {
    /// Leaves every queue. The next head of each queue this ticket headed is
    /// always woken, even after a grant that left no slot free: it asks the
    /// store once, which tells it when the earliest lease expires (without
    /// that it would sleep past an expiry). A lease a hand-off granted
    /// that nobody took (the borrower gave up meanwhile) is returned at
    /// once, unless it is another borrow's: a hand-off to a keyed
    /// borrower answers with the lease already active under its key, which
    /// may be another borrower's of the same key (rule "Lost replies": a
    /// borrow gives back only leases under its own ids).
    fn drop(&mut self) {
        self.leave_queues();
        if let Some(lease) = self.take_lease() {
            let theirs = self
                .waiter
                .request
                .as_ref()
                .is_some_and(|asked| asked.key.is_some() && asked.lease != lease.id);
            if !theirs && !crate::sync::planted("cancel_keeps_handed") {
                self.giver.give_back(&lease);
            }
        }
    }
}
