//! What a dropped call leaves behind is cleaned up here.
//!
//! Two cases: a borrow dropped while its store call is in flight (the store
//! may still grant, so the grant is returned once it lands), and a guard
//! dropped while it holds a lease (the lease is returned at once). Both run
//! the store call to completion without the caller, like deadpool's drop
//! guards.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::SystemTime;

use crate::detach::{BoxFuture, run_detached, run_detached_again};
use crate::give_back::{return_detached, return_for_the_gone};
use crate::wait::WaiterIdCell;
use crate::{
    error::Result, id::LeaseId, id::PoolId, id::WaiterId, lease::Lease, primitives::Store,
    request::BorrowRequest, request::TryBorrow, request::TryBorrowAll,
};

/// What one attempt at the store came to.
pub(crate) enum Step<G> {
    Granted(G),
    /// Nothing granted; a lease whose expiry may change that expires then.
    Exhausted(Option<SystemTime>),
}

/// A store's answer to one borrow attempt, single or multi-pool.
pub(crate) trait Answer: Send + Unpin + 'static {
    /// What the borrower gets.
    type Granted;
    /// The leases the answer grants, for returning them if nobody takes them.
    fn leases(&self) -> &[Lease];
    fn step(self) -> Step<Self::Granted>;
    /// What the borrower gets from a lease handed over to it (single-pool
    /// borrowers only are handed leases).
    fn handed(lease: Lease) -> Self::Granted;
}

impl Answer for TryBorrow {
    type Granted = Lease;

    fn leases(&self) -> &[Lease] {
        match self {
            TryBorrow::Granted { lease } => std::slice::from_ref(lease),
            TryBorrow::Exhausted { .. } => &[],
        }
    }

    fn handed(lease: Lease) -> Lease {
        lease
    }

    fn step(self) -> Step<Lease> {
        match self {
            TryBorrow::Granted { lease } => Step::Granted(lease),
            TryBorrow::Exhausted { next_expiry } => Step::Exhausted(next_expiry),
        }
    }
}

impl Answer for TryBorrowAll {
    type Granted = Vec<Lease>;

    fn leases(&self) -> &[Lease] {
        match self {
            TryBorrowAll::Granted { leases } => leases,
            TryBorrowAll::Exhausted { .. } => &[],
        }
    }

    fn handed(lease: Lease) -> Vec<Lease> {
        vec![lease]
    }

    fn step(self) -> Step<Vec<Lease>> {
        match self {
            TryBorrowAll::Granted { leases } => Step::Granted(leases),
            TryBorrowAll::Exhausted { next_expiry } => Step::Exhausted(next_expiry),
        }
    }
}

/// A borrow attempt in flight. If it is dropped before it completes, the
/// call is finished in a spawned task and the leases it grants are returned
/// at once: only those this attempt made, never a keyed lease it was
/// answered with, which belongs to the borrow that first got it.
///
/// A store that answers at once ([`Store::in_place`]) makes it ready
/// from the start, with no future to box.
pub(crate) struct InFlight<A: Answer> {
    store: Arc<dyn Store>,
    made: Made,
    ready: Option<Result<A>>,
    call: Option<BoxFuture<Result<A>>>,
    /// The queued place the attempt asks with, to forget once more after a
    /// detached call finishes (the call may have written it after the
    /// [`QueuePlace`] was left).
    place: Option<(Vec<PoolId>, WaiterId)>,
}

/// The lease ids an attempt asked for.
#[derive(Debug, Clone)]
pub(crate) enum Made {
    One(LeaseId),
    Many(Vec<LeaseId>),
}

impl Made {
    /// The ids, one per pool in order.
    pub(crate) fn ids(&self) -> &[LeaseId] {
        match self {
            Made::One(one) => std::slice::from_ref(one),
            Made::Many(many) => many,
        }
    }

    fn contains(&self, id: LeaseId) -> bool {
        match self {
            Made::One(one) => *one == id,
            Made::Many(many) => many.contains(&id),
        }
    }
}

/// A bound request to a store with sessions while none is open (the first
/// is opening, or a lost one is being replaced): it must not be granted
/// unbound, so the attempt fails retryably and a waiting
/// borrow asks again once the session is open.
pub(crate) fn unsessioned(
    store: &Arc<dyn Store>,
    request: &BorrowRequest,
) -> Option<crate::error::Error> {
    let session = store.session()?;
    (request.bound && request.session.is_none()).then(|| crate::error::Error::Storage {
        operation: "borrow",
        retryable: true,
        source: format!(
            "no session is open on the store (its state: {:?}): a bound lease needs one; \
             retrying until the session opens",
            session.state()
        )
        .into(),
    })
}

impl InFlight<TryBorrow> {
    pub(crate) fn one(store: &Arc<dyn Store>, request: BorrowRequest) -> Self {
        let made = Made::One(request.lease);
        let answer = match unsessioned(store, &request) {
            Some(e) => Some(Err(e)),
            None => store.in_place().map(|s| s.try_borrow(&request)),
        };
        if let Some(answer) = answer {
            return Self {
                store: store.clone(),
                made,
                ready: Some(answer),
                call: None,
                place: None,
            };
        }
        let owned = store.clone();
        Self {
            store: store.clone(),
            made,
            ready: None,
            call: Some(Box::pin(async move { owned.try_borrow(&request).await })),
            place: None,
        }
    }
}

impl InFlight<TryBorrowAll> {
    pub(crate) fn all(store: &Arc<dyn Store>, requests: Vec<BorrowRequest>) -> Self {
        if let Some(e) = requests.iter().find_map(|r| unsessioned(store, r)) {
            return Self {
                store: store.clone(),
                made: Made::Many(requests.iter().map(|r| r.lease).collect()),
                ready: Some(Err(e)),
                call: None,
                place: None,
            };
        }
        let owned = store.clone();
        Self {
            store: store.clone(),
            made: Made::Many(requests.iter().map(|r| r.lease).collect()),
            ready: None,
            call: Some(Box::pin(
                async move { owned.try_borrow_all(&requests).await },
            )),
            place: None,
        }
    }
}

impl<A: Answer> InFlight<A> {
    /// The lease ids the attempt asks for, one per pool in order.
    pub(crate) fn made(&self) -> Made {
        self.made.clone()
    }

    /// Marks the attempt as made from `place`. If it is dropped in flight,
    /// `place` is left at once (by the [`QueuePlace`]) and, once the call
    /// finishes detached, left again: a refused attempt joins or refreshes
    /// the store's queue, and must not leave a place behind by landing after
    /// the first leave.
    pub(crate) fn made_from(mut self, place: &QueuePlace<'_>) -> Self {
        if self.call.is_some() {
            self.place = Some((place.pools.to_vec(), place.waiter()));
        }
        self
    }
}

impl<A: Answer> Future for InFlight<A> {
    type Output = Result<A>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(answer) = self.ready.take() {
            return Poll::Ready(answer);
        }
        let Some(call) = self.call.as_mut() else {
            return Poll::Pending;
        };
        let out = std::task::ready!(call.as_mut().poll(cx));
        self.call = None;
        Poll::Ready(out)
    }
}

impl<A: Answer> Drop for InFlight<A> {
    fn drop(&mut self) {
        if let Some(Ok(answer)) = self.ready.take() {
            // Answered at once, but never polled: nobody takes the grant.
            for lease in answer.leases().iter().filter(|l| self.made.contains(l.id)) {
                return_detached(&self.store, lease);
            }
        }
        let Some(call) = self.call.take() else {
            return;
        };
        let store = self.store.clone();
        let made = std::mem::replace(&mut self.made, Made::Many(Vec::new()));
        let place = self.place.take();
        run_detached(Box::pin(async move {
            let answer = call.await;
            if let Ok(answer) = &answer {
                for lease in answer.leases().iter().filter(|l| made.contains(l.id)) {
                    return_for_the_gone(&store, lease.clone()).await;
                }
            }
            if let Some((pools, waiter)) = place {
                for pool in pools {
                    let _ = store.leave_queue(pool, waiter).await;
                }
            }
        }));
    }
}

/// A queued head's place in the store's own queue of each of its pools
/// (first come, first served across processes). Held from the head's first attempt; unless
/// [`QueuePlace::granted`] is called, dropping it tells the store to forget
/// the places.
pub(crate) struct QueuePlace<'a> {
    store: &'a Arc<dyn Store>,
    pools: &'a [PoolId],
    /// Made when an attempt or a claiming return first needs it (a borrow
    /// served by a hand-off in this process never asks the store from its
    /// queue, and needs none).
    waiter: WaiterIdCell,
    armed: bool,
}

impl<'a> QueuePlace<'a> {
    pub(crate) fn new(
        store: &'a Arc<dyn Store>,
        pools: &'a [PoolId],
        waiter: WaiterIdCell,
    ) -> Self {
        Self {
            store,
            pools,
            waiter,
            armed: true,
        }
    }

    /// The waiter's id, made on first use.
    pub(crate) fn waiter(&self) -> WaiterId {
        self.waiter.get_or_make()
    }

    /// The store granted to this waiter and forgot its places itself: the
    /// place has nothing to leave when dropped.
    pub(crate) fn granted(&mut self) {
        self.armed = false;
    }
}

impl Drop for QueuePlace<'_> {
    fn drop(&mut self) {
        // No id made: no attempt carried it, and the store knows no place.
        if let (true, Some(waiter)) = (self.armed, self.waiter.made()) {
            let (store, pools) = (self.store.clone(), self.pools.to_vec());
            run_detached_again(move || {
                let (store, pools) = (store.clone(), pools.clone());
                Box::pin(async move {
                    for pool in pools {
                        let _ = store.leave_queue(pool, waiter).await;
                    }
                })
            });
        }
    }
}
