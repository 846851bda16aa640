//! What a dropped call leaves behind is cleaned up here (SPEC R12, R13).
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

use tokio::sync::{Mutex, OwnedMutexGuard};

use crate::clock::truncate_ms;
use crate::detach::{BoxFuture, run_detached};
use crate::{
    BorrowRequest, Lease, LeaseId, PoolId, Result, Store, TryBorrow, TryBorrowAll, WaiterId,
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
}

impl Answer for TryBorrow {
    type Granted = Lease;

    fn leases(&self) -> &[Lease] {
        match self {
            TryBorrow::Granted { lease } => std::slice::from_ref(lease),
            TryBorrow::Exhausted { .. } => &[],
        }
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
/// A store that answers at once ([`Store::try_borrow_now`]) makes it ready
/// from the start, with no future to box.
pub(crate) struct InFlight<A: Answer> {
    store: Arc<dyn Store>,
    made: Made,
    ready: Option<Result<A>>,
    call: Option<BoxFuture<Result<A>>>,
    /// Held until the call has finished, detached or not, so that a
    /// [`QueuePlace`] left meanwhile is forgotten only after it.
    order: Option<OwnedMutexGuard<()>>,
}

/// The lease ids an attempt asked for.
enum Made {
    One(LeaseId),
    Many(Vec<LeaseId>),
}

impl Made {
    fn contains(&self, id: LeaseId) -> bool {
        match self {
            Made::One(one) => *one == id,
            Made::Many(many) => many.contains(&id),
        }
    }
}

impl InFlight<TryBorrow> {
    pub(crate) fn one(store: &Arc<dyn Store>, request: BorrowRequest) -> Self {
        let made = Made::One(request.lease);
        if let Some(answer) = store.try_borrow_now(&request) {
            return Self {
                store: store.clone(),
                made,
                ready: Some(answer),
                call: None,
                order: None,
            };
        }
        let owned = store.clone();
        Self {
            store: store.clone(),
            made,
            ready: None,
            call: Some(Box::pin(async move { owned.try_borrow(&request).await })),
            order: None,
        }
    }
}

impl InFlight<TryBorrowAll> {
    pub(crate) fn all(store: &Arc<dyn Store>, requests: Vec<BorrowRequest>) -> Self {
        let owned = store.clone();
        Self {
            store: store.clone(),
            made: Made::Many(requests.iter().map(|r| r.lease).collect()),
            ready: None,
            call: Some(Box::pin(
                async move { owned.try_borrow_all(&requests).await },
            )),
            order: None,
        }
    }
}

impl<A: Answer> InFlight<A> {
    /// Makes `place`'s leaving wait for this attempt to finish, even if the
    /// attempt is dropped and finished detached: an attempt that joins or
    /// refreshes the store's queue must not land after the leave (R12).
    pub(crate) fn ordered_before(mut self, place: &QueuePlace<'_>) -> Self {
        if self.call.is_some() {
            // Attempts of one borrow are made one at a time, so the lock is
            // free; a place whose leave is already running is never asked.
            self.order = place.order.clone().try_lock_owned().ok();
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
        self.order = None;
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
        let order = self.order.take();
        run_detached(Box::pin(async move {
            let _order = order;
            let Ok(answer) = call.await else { return };
            for lease in answer.leases().iter().filter(|l| made.contains(l.id)) {
                let now = truncate_ms(store.clock().now());
                // Nobody is left to hear about a failure; the lease then
                // frees itself at its ttl.
                let _ = store.return_lease(lease.pool, lease.id, now).await;
            }
        }));
    }
}

/// A queued head's place in the store's own queue of each of its pools
/// (R11 across processes). Held from the head's first attempt; unless
/// [`QueuePlace::granted`] is called, dropping it tells the store to forget
/// the places (R12).
pub(crate) struct QueuePlace<'a> {
    store: &'a Arc<dyn Store>,
    pools: &'a [PoolId],
    pub(crate) waiter: WaiterId,
    armed: bool,
    /// Locked by the attempt in flight ([`InFlight::ordered_before`]).
    order: Arc<Mutex<()>>,
}

impl<'a> QueuePlace<'a> {
    pub(crate) fn new(store: &'a Arc<dyn Store>, pools: &'a [PoolId]) -> Self {
        Self {
            store,
            pools,
            waiter: WaiterId::new(),
            armed: true,
            order: Arc::new(Mutex::new(())),
        }
    }

    /// The store granted to this waiter and forgot its places itself.
    pub(crate) fn granted(mut self) {
        self.armed = false;
    }
}

impl Drop for QueuePlace<'_> {
    fn drop(&mut self) {
        if self.armed {
            let (store, pools, waiter) = (self.store.clone(), self.pools.to_vec(), self.waiter);
            let order = self.order.clone();
            run_detached(Box::pin(async move {
                // After the attempt in flight, which may still write the
                // place this forgets.
                let _turn = order.lock_owned().await;
                for pool in pools {
                    let _ = store.leave_queue(pool, waiter).await;
                }
            }));
        }
    }
}

/// Returns `lease` without waiting for the answer: used by guards on drop.
/// In place if the store answers at once ([`Store::return_lease_now`]).
pub(crate) fn return_detached(store: &Arc<dyn Store>, lease: &Lease) {
    let (pool, id) = (lease.pool, lease.id);
    let now = truncate_ms(store.clock().now());
    if store.return_lease_now(pool, id, now).is_some() {
        return;
    }
    let store = store.clone();
    run_detached(Box::pin(async move {
        let _ = store.return_lease(pool, id, now).await;
    }));
}
