//! [`Changes::hand_off`]: a return that grants its freed slots to this
//! process's queued borrowers in its own step, for a store whose return
//! runs in place.

use crate::sync::Ordering;

use super::Changes;
use crate::{id::PoolId, id::WaiterId, lease::Lease, request::BorrowRequest, request::TryBorrow};

impl Changes {
    /// Hands slots of `pool` just freed to this process's queued borrowers
    /// of it, in queue order, while the caller still holds the
    /// pool's atomic step (its lock or transaction) and before anyone else
    /// can take them. `count` is the pool's count in that step: the queue
    /// is first [weighed](Changes::weigh) with it, so that a waiter for
    /// more slots than `count` is passed over. `grant` grants one request
    /// as a borrow would, in that
    /// same step; each lease it grants goes to the head, which is taken
    /// out of the queue and woken with it. It stops at the first refusal,
    /// telling the new head the earliest expiry the refusal reported (so a
    /// head that asks for more slots than are free holds back everyone
    /// behind it), at a multi-pool head, or at a
    /// head whose own store call is in flight (a grant here would give it a
    /// second lease, or, with a key, the very lease its call gets, which
    /// the borrow would then give back as a spare); those are woken to ask
    /// the store, as by [`notify`](Changes::notify). Returns how many leases were handed
    /// over; costs one atomic load when nobody waits.
    ///
    /// A store that calls this in its return instead of `notify` must also
    /// end those leases if the step does not commit. Each request carries
    /// a fresh [`LeaseId`](crate::LeaseId) and the borrower's ttl, key and owner; `grant`
    /// grants it at the store's own reading of its clock.
    pub fn hand_off(
        &self,
        pool: PoolId,
        count: u32,
        mut grant: impl FnMut(&BorrowRequest) -> TryBorrow,
    ) -> usize {
        if !self.has_waiters() {
            return 0;
        }
        if !self.hand_offs_allowed() {
            self.notify(pool);
            return 0;
        }
        self.tell_watchers();
        let mut queues = self.queues.lock();
        let Some(queue) = queues.get_mut(&pool) else {
            return 0;
        };
        queue.weigh(count);
        let mut handed = 0;
        while let Some(index) = queue.head_index() {
            let head = queue.waiters[index].clone();
            let Some(asked) = &head.request else {
                head.wake_to_ask();
                break;
            };
            let mut request = BorrowRequest::new(pool, asked.lease, asked.ttl);
            request.slots = asked.slots;
            request.bound = asked.bound;
            request.key.clone_from(&asked.key);
            request.owner.clone_from(&asked.owner);
            // Under the head's state lock, so that it cannot start a call
            // of its own between the look and the grant.
            let mut state = head.state.lock();
            if state.asking {
                // Its own call is in flight (or has just been granted): a
                // grant here would give it a second lease, which its
                // ticket then gives back (a slot held by nobody meanwhile,
                // and a borrower at a position not the lowest), or, with a
                // key, the very lease its call gets. It asks again once
                // that call ends, and finds the freed slot.
                state.next_expiry = None;
                drop(state);
                head.notify.notify_one();
                break;
            }
            match grant(&request) {
                TryBorrow::Granted { lease } => {
                    queue.waiters.remove(index);
                    self.total.fetch_sub(1, Ordering::AcqRel);
                    // The lease first: a ticket that sees itself out of
                    // the queue must find it.
                    state.lease = Some(lease);
                    drop(state);
                    head.queued.store(false, Ordering::Release);
                    if !crate::sync::planted("hand_off_no_wake") {
                        head.notify.notify_one();
                    }
                    handed += 1;
                }
                TryBorrow::Exhausted { next_expiry } => {
                    state.next_expiry = Some(next_expiry);
                    drop(state);
                    head.notify.notify_one();
                    break;
                }
            }
        }
        if queue.waiters.is_empty() {
            queues.remove(&pool);
        }
        handed
    }

    /// Gives `lease`, which a return (in any process) handed to the
    /// borrower `waiter` of `pool` through the store's own queue, to that
    /// borrower if it waits here, from the moment the message that tells of
    /// it arrives (rule "A handed slot is held on arrival"): it leaves the
    /// queue with it, is woken, and the next head is woken. The store's
    /// step ended the borrower's place in the store's queue, or the
    /// store's confirmation of the lease does ([`SessionEnds::unconfirmed`]
    /// bounds the lease until then).
    ///
    /// `Err` with the lease if the borrower does not wait here, has a store
    /// call of its own in flight (which finds the lease itself), was
    /// claimed or handed a lease already, or while hand-offs are not
    /// allowed ([`hand_offs_allowed`](Changes::hand_offs_allowed)): the
    /// store then only tells it, as [`notify_waiter`](Changes::notify_waiter)
    /// does, and the borrower takes the lease at its next look.
    ///
    /// [`SessionEnds::unconfirmed`]: crate::store::SessionEnds::unconfirmed
    pub fn arrived(&self, pool: PoolId, waiter: WaiterId, lease: Lease) -> Result<(), Lease> {
        if !self.has_waiters() || !self.hand_offs_allowed() {
            return Err(lease);
        }
        let mut queues = self.queues.lock();
        let Some(queue) = queues.get_mut(&pool) else {
            return Err(lease);
        };
        let head = queue.head_index();
        let Some(index) = queue
            .waiters
            .iter()
            .position(|w| w.id.get() == Some(&waiter))
        else {
            return Err(lease);
        };
        let taker = queue.waiters[index].clone();
        {
            // Under the borrower's state lock, so that it cannot start a
            // call of its own between the look and the delivery.
            let mut state = taker.state.lock();
            // A single-pool borrower, as the store's queue hands slots to.
            let asking = state.asking && !crate::sync::planted("arrived_while_asking");
            if asking || state.claimed || state.lease.is_some() || taker.request.is_none() {
                return Err(lease);
            }
            queue.waiters.remove(index);
            self.total.fetch_sub(1, Ordering::AcqRel);
            // The lease first: a ticket that sees itself out of the queue
            // must find it.
            state.leave_place = false;
            state.lease = Some(lease);
        }
        taker.queued.store(false, Ordering::Release);
        taker.notify.notify_one();
        if queue.waiters.is_empty() {
            queues.remove(&pool);
        } else if head == Some(index) {
            queue.notify_head();
        }
        Ok(())
    }
}
