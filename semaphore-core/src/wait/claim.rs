//! A return that grants its slot to this process's queued head in the
//! store's own step, when that step is asynchronous (a database
//! transaction): [`Changes::claim_head`], then [`Claim::deliver`] (issue 22).
//! [`Changes::hand_off`] does the same for a store whose return runs in
//! place.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{Changes, Waiter};
use crate::{BorrowRequest, Lease, PoolId, WaiterId};

/// This process's queued head of a pool, claimed by a return that may grant
/// it a slot. While claimed the head does not ask the store (so it cannot
/// be granted twice); it waits until the claim delivers a lease
/// ([`deliver`](Claim::deliver)) or is dropped, which wakes it to ask as a
/// plain change would.
///
/// A store that claims must, once its step has committed a grant for the
/// claim's [`request`](Claim::request), deliver that lease; if the head
/// left meanwhile, `deliver` hands the lease back for the store to return
/// (R12). A store must finish the step and the delivery even if its caller
/// is dropped (for example in a spawned task), or the granted lease would
/// be held by nobody until its ttl.
pub struct Claim {
    pool: PoolId,
    waiter: Arc<Waiter>,
    request: BorrowRequest,
    done: bool,
}

impl std::fmt::Debug for Claim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Claim")
            .field("pool", &self.pool)
            .field("request", &self.request)
            .finish_non_exhaustive()
    }
}

impl Changes {
    /// Claims the head of this process's queue of `pool`, if a return may
    /// grant it a slot: a one-slot borrower of this pool alone without a
    /// key, not asking the store right now, while hand-offs are allowed
    /// ([`hand_offs_allowed`](Changes::hand_offs_allowed)). `None`
    /// otherwise; costs one atomic load when nobody waits.
    pub fn claim_head(&self, pool: PoolId) -> Option<Claim> {
        if !self.has_waiters() || !self.hand_offs_allowed() {
            return None;
        }
        let queues = self.queues.lock();
        let head = queues.get(&pool)?.waiters.front()?;
        let asked = head.request.as_ref()?;
        if asked.slots != 1 || asked.key.is_some() {
            return None;
        }
        let mut state = head.state.lock();
        if state.asking || state.claimed || state.lease.is_some() {
            return None;
        }
        state.claimed = true;
        let mut request = BorrowRequest::new(pool, asked.lease, asked.ttl);
        request.bound = asked.bound;
        request.owner.clone_from(&asked.owner);
        request.waiter = Some(*head.id.get_or_init(WaiterId::new));
        drop(state);
        Some(Claim {
            pool,
            waiter: head.clone(),
            request,
            done: false,
        })
    }
}

impl Claim {
    /// What to grant the head: its pool, a fresh lease id, its ttl, owner
    /// and binding, one slot, and its id in the store's queue (whose place,
    /// if it took one, the grant ends).
    pub fn request(&self) -> &BorrowRequest {
        &self.request
    }

    /// Gives `lease`, granted for [`request`](Claim::request), to the head:
    /// it leaves its queue with it, and the next head is woken. `Err` with
    /// the lease if the head is no longer queued (its borrow gave up or was
    /// dropped): the store returns it.
    pub fn deliver(mut self, changes: &Changes, lease: Lease) -> Result<(), Lease> {
        self.done = true;
        let mut queues = changes.queues.lock();
        let Some(queue) = queues.get_mut(&self.pool) else {
            self.waiter.state.lock().claimed = false;
            return Err(lease);
        };
        let Some(index) = queue
            .waiters
            .iter()
            .position(|w| Arc::ptr_eq(w, &self.waiter))
        else {
            self.waiter.state.lock().claimed = false;
            return Err(lease);
        };
        queue.waiters.remove(index);
        changes.total.fetch_sub(1, Ordering::AcqRel);
        {
            // The lease first: a ticket that sees itself out of the queue
            // must find it.
            let mut state = self.waiter.state.lock();
            state.lease = Some(lease);
            state.claimed = false;
        }
        self.waiter.queued.store(false, Ordering::Release);
        self.waiter.notify.notify_one();
        if queue.waiters.is_empty() {
            queues.remove(&self.pool);
        } else if index == 0 {
            queue.notify_head();
        }
        Ok(())
    }
}

impl Drop for Claim {
    /// A claim not delivered lets the head go and wakes it to ask the store.
    fn drop(&mut self) {
        if !self.done {
            self.waiter.state.lock().claimed = false;
            self.waiter.wake_to_ask();
        }
    }
}
