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
use std::task::{Context, Poll, Waker};

use crate::clock::truncate_ms;
use crate::{BorrowRequest, Lease, PoolId, Result, Store, TryBorrow, WaiterId};

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// A `try_borrow` in flight. If it is dropped before it completes, the call
/// is finished in a spawned task and a grant it makes is returned at once.
pub(crate) struct InFlight {
    store: Arc<dyn Store>,
    request: BorrowRequest,
    call: Option<BoxFuture<Result<TryBorrow>>>,
}

impl InFlight {
    pub(crate) fn new(store: &Arc<dyn Store>, request: BorrowRequest) -> Self {
        let owned = store.clone();
        Self {
            store: store.clone(),
            request,
            call: Some(Box::pin(async move { owned.try_borrow(&request).await })),
        }
    }
}

impl Future for InFlight {
    type Output = Result<TryBorrow>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(call) = self.call.as_mut() else {
            return Poll::Pending;
        };
        let out = std::task::ready!(call.as_mut().poll(cx));
        self.call = None;
        Poll::Ready(out)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let Some(call) = self.call.take() else {
            return;
        };
        let store = self.store.clone();
        let pool = self.request.pool;
        let lease = self.request.lease;
        run_detached(Box::pin(async move {
            if let Ok(TryBorrow::Granted { .. }) = call.await {
                let now = truncate_ms(store.clock().now());
                // Nobody is left to hear about a failure; the lease then
                // frees itself at its ttl.
                let _ = store.return_lease(pool, lease, now).await;
            }
        }));
    }
}

/// A queued head's place in the store's own queue (R11 across processes).
/// Held from the head's first attempt; unless [`QueuePlace::granted`] is
/// called, dropping it tells the store to forget the place (R12).
pub(crate) struct QueuePlace<'a> {
    store: &'a Arc<dyn Store>,
    pool: PoolId,
    pub(crate) waiter: WaiterId,
    armed: bool,
}

impl<'a> QueuePlace<'a> {
    pub(crate) fn new(store: &'a Arc<dyn Store>, pool: PoolId) -> Self {
        Self {
            store,
            pool,
            waiter: WaiterId::new(),
            armed: true,
        }
    }

    /// The store granted to this waiter and forgot its place itself.
    pub(crate) fn granted(mut self) {
        self.armed = false;
    }
}

impl Drop for QueuePlace<'_> {
    fn drop(&mut self) {
        if self.armed {
            let (store, pool, waiter) = (self.store.clone(), self.pool, self.waiter);
            run_detached(Box::pin(async move {
                let _ = store.leave_queue(pool, waiter).await;
            }));
        }
    }
}

/// Returns `lease` without waiting for the answer: used by guards on drop.
pub(crate) fn return_detached(store: &Arc<dyn Store>, lease: &Lease) {
    let store = store.clone();
    let (pool, id) = (lease.pool, lease.id);
    run_detached(Box::pin(async move {
        let now = truncate_ms(store.clock().now());
        let _ = store.return_lease(pool, id, now).await;
    }));
}

/// Runs `work` to completion without an owner: polled once here, which
/// finishes it outright for stores that do not do I/O, and spawned on the
/// current tokio runtime if it is still pending. Outside a runtime nothing
/// is run, and a lease involved frees itself at its ttl.
fn run_detached(mut work: BoxFuture<()>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let mut cx = Context::from_waker(Waker::noop());
    if work.as_mut().poll(&mut cx).is_pending() {
        drop(runtime.spawn(work));
    }
}
