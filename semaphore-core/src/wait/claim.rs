//! A return that grants its slot to this process's queued borrowers in the
//! store's own step, when that step is asynchronous (a database
//! transaction): [`Changes::claim_head`], then [`Claim::deliver`].
//! [`Changes::hand_off`] does the same for a store whose return runs in
//! place.
//!
//! Every return in flight may hold a claim. With one
//! claim at a time, and none while the head asked the store itself, the
//! returns of a busy pool nearly all found the head claimed or asking: they
//! left their slots free, and the head took them one store call at a time,
//! so that slots sat idle while borrowers waited.

use crate::sync::Ordering;
use std::sync::Arc;

use super::{Changes, HandOff, Waiter};
use crate::{id::LeaseId, id::PoolId, id::WaiterId, lease::Lease, request::BorrowRequest};

/// A lease that a return in flight may grant to this process's queued
/// borrowers of a pool. Each claim names one borrower to the store (whose
/// place in the store's queue, if it took one, the grant ends); a named
/// borrower does not ask the store itself until its claim ends, so that it
/// cannot be granted twice. The lease goes to the head of the queue when it
/// is delivered ([`deliver`](Claim::deliver)), whichever borrower the claim
/// named; a claim dropped undelivered wakes the head to ask the
/// store, as a plain change would.
///
/// A store that claims must, once its step has committed a grant for the
/// claim's [`request`](Claim::request), deliver that lease; if nobody takes
/// it (the borrowers left meanwhile), `deliver` hands the lease back for
/// the store to return. A store must finish the step and the delivery
/// even if its caller is dropped (for example in a spawned task), or the
/// granted lease would be held by nobody until its ttl.
pub struct Claim {
    changes: Arc<Changes>,
    pool: PoolId,
    /// The borrower the request names in the store's queue.
    named: Arc<Waiter>,
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

/// What a queued borrower asks for, if a claim may grant it: one slot of
/// its pool alone, without a key.
fn claimable(waiter: &Waiter) -> Option<&HandOff> {
    waiter
        .request
        .as_ref()
        .filter(|asked| asked.slots == 1 && asked.key.is_none())
}

/// Whether a lease granted for `a` suits `b` as well.
fn alike(a: &HandOff, b: &HandOff) -> bool {
    a.ttl == b.ttl && a.bound == b.bound && a.owner == b.owner
}

impl Changes {
    /// Claims a lease for this process's queued borrowers of `pool`, if a
    /// return may grant them one: every borrower from the head up to the
    /// one the claim names asks for one slot of this pool alone, without a
    /// key, with the same ttl, owner and binding (any of them may get the
    /// lease), and the named one is the first that is not asking the store
    /// itself and that no other claim names. `None` if there is none, or
    /// while hand-offs are not allowed
    /// ([`hand_offs_allowed`](Changes::hand_offs_allowed)); costs one
    /// atomic load when nobody waits.
    pub fn claim_head(self: &Arc<Self>, pool: PoolId) -> Option<Claim> {
        if !self.has_waiters() || !self.hand_offs_allowed() {
            return None;
        }
        let queues = self.queues.lock();
        let mut like: Option<&HandOff> = None;
        // Those set aside hold back no one.
        let waiters = queues.get(&pool)?.waiters.iter();
        for waiter in waiters.filter(|w| !w.is_aside()) {
            let asked = claimable(waiter)?;
            let like = *like.get_or_insert(asked);
            if !alike(like, asked) {
                return None;
            }
            let mut state = waiter.state.lock();
            if state.asking || state.claimed || state.lease.is_some() {
                continue;
            }
            state.claimed = true;
            // A lease id of its own: the lease may go to another borrower.
            let mut request = BorrowRequest::new(pool, LeaseId::new(), like.ttl);
            request.bound = like.bound;
            request.owner.clone_from(&like.owner);
            request.waiter = Some(*waiter.id.get_or_init(WaiterId::new));
            return Some(Claim {
                changes: self.clone(),
                pool,
                named: waiter.clone(),
                request,
                done: false,
            });
        }
        None
    }
}

impl Claim {
    /// What to grant: its pool, a fresh lease id, the borrowers' ttl, owner
    /// and binding, one slot, and the id in the store's queue of the
    /// borrower it names (whose place, if it took one, the grant ends).
    pub fn request(&self) -> &BorrowRequest {
        &self.request
    }

    /// Gives `lease`, granted for [`request`](Claim::request), to the head
    /// of the queue: it leaves the queue with it, and the next head is
    /// woken. A lease that the store had already handed to the named
    /// borrower through its own queue (another lease id) goes to that
    /// borrower. `Err` with the lease if nobody takes it (the borrowers gave
    /// up or were dropped): the store returns it.
    pub fn deliver(mut self, lease: Lease) -> Result<(), Lease> {
        self.done = true;
        let mut queues = self.changes.queues.lock();
        let handed = lease.id != self.request.lease;
        let mut head = None;
        let taker = queues.get_mut(&self.pool).and_then(|queue| {
            head = queue.head_index();
            let index = if handed {
                queue
                    .waiters
                    .iter()
                    .position(|w| Arc::ptr_eq(w, &self.named))?
            } else {
                let asked = claimable(queue.head()?)?;
                let like = self.named.request.as_ref()?;
                if !alike(asked, like) {
                    return None;
                }
                head?
            };
            Some((index, queue.waiters.remove(index)?))
        });
        let Some((index, taker)) = taker else {
            self.named.state.lock().claimed = false;
            return Err(lease);
        };
        self.changes.total.fetch_sub(1, Ordering::AcqRel);
        let wakes_first = crate::sync::planted("claim_wakes_before_lease");
        if wakes_first {
            taker.queued.store(false, Ordering::Release);
            taker.notify.notify_one();
            drop(queues);
            crate::sync::yield_now();
            queues = self.changes.queues.lock();
        }
        {
            // The lease first: a ticket that sees itself out of the queue
            // must find it, and the named borrower must not ask before (it
            // could find a handed lease again). A lease handed to the named
            // borrower came with its place gone; a claimed one ended only
            // the named borrower's place, as the claim's step found it.
            let mut state = taker.state.lock();
            state.leave_place = !handed && state.asked;
            state.lease = Some(lease);
        }
        self.named.state.lock().claimed = false;
        if !wakes_first {
            taker.queued.store(false, Ordering::Release);
            taker.notify.notify_one();
        }
        if let Some(queue) = queues.get(&self.pool) {
            if queue.waiters.is_empty() {
                queues.remove(&self.pool);
            } else if head == Some(index) {
                queue.notify_head();
            }
        }
        Ok(())
    }
}

impl Drop for Claim {
    /// A claim not delivered lets its borrower go and wakes the head to ask
    /// the store.
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let queues = self.changes.queues.lock();
        self.named.state.lock().claimed = false;
        if let Some(queue) = queues.get(&self.pool) {
            queue.notify_head();
        }
    }
}
