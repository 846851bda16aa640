//! [`Changes::hand_off`]: a return that grants its freed slots to this
//! process's queued borrowers in its own step, for a store whose return
//! runs in place.

use crate::sync::Ordering;

use super::Changes;
use crate::{id::PoolId, request::BorrowRequest, request::TryBorrow};

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
}
