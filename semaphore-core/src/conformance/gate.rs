//! [`GatedStore`]: a store wrapper that holds one borrow call at a gate, so
//! a case can drop the borrow while its store call is in flight.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use tokio::sync::{Notify, Semaphore};

use crate::store::{BorrowRequest, Store, TryBorrow, TryBorrowAll, WaiterId};
use crate::{
    error::Result, id::LeaseId, id::PoolId, lease::Holder, lease::Lease, lease::PoolState,
};

/// Where a [`GatedStore`] holds the borrow call it catches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Before the wrapped store sees the call: it has done nothing yet.
    BeforeCall,
    /// After the wrapped store granted: the grant is committed and has not
    /// reached the borrower yet. A call the store answers otherwise passes,
    /// and the gate stays armed.
    AfterGrant,
    /// After the wrapped store answered an `inspect` (not a borrow): a
    /// count read that has not reached its reader yet, for a case to change
    /// the count meanwhile.
    AfterInspect,
}

/// Wraps any [`Store`] and, once armed, holds the next `try_borrow` or
/// `try_borrow_all` call (the next `inspect`, for [`Stop::AfterInspect`])
/// at a gate until [`release`](GatedStore::release).
/// Only calls that start after [`arm`](GatedStore::arm) are caught: wait
/// for [`quiet`](GatedStore::quiet) after arming to be sure of the next.
///
/// Every other call passes straight through. The wrapper also counts the
/// calls inside the store at any instant ([`busy`](GatedStore::busy)), so a
/// case can tell when the clean-up a dropped borrow left behind has run.
pub struct GatedStore {
    inner: Arc<dyn Store>,
    armed: Mutex<Option<Stop>>,
    caught: Notify,
    gate: Semaphore,
    busy: AtomicUsize,
    held: AtomicUsize,
}

impl GatedStore {
    /// A wrapper around `inner`, not armed.
    pub fn new(inner: Arc<dyn Store>) -> Self {
        Self {
            inner,
            armed: Mutex::new(None),
            caught: Notify::new(),
            gate: Semaphore::new(0),
            busy: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
        }
    }

    /// Holds the next borrow call at `stop`. Only that one call is held.
    ///
    /// Until [`release`](GatedStore::release), returns in this process do
    /// not hand slots over ([`Changes::hand_off`](crate::store::Changes::hand_off)): they wake the head,
    /// whose own call the gate then catches.
    pub fn arm(&self, stop: Stop) {
        self.inner.changes().pause_hand_offs(true);
        *self.armed.lock() = Some(stop);
    }

    /// [`arm`](GatedStore::arm), but returns in this process go on handing
    /// slots over ([`Changes::hand_off`](crate::store::Changes::hand_off)) while the call is held: for a
    /// case about a hand-off that meets a head's own call in flight.
    pub fn arm_keeping_hand_offs(&self, stop: Stop) {
        *self.armed.lock() = Some(stop);
    }

    /// Completes once the armed call is held at the gate.
    pub async fn caught(&self) {
        self.caught.notified().await;
    }

    /// Lets the held call go on. From here it counts as busy, not held,
    /// until it leaves the store.
    pub fn release(&self) {
        self.inner.changes().pause_hand_offs(false);
        let _ = self
            .held
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        self.gate.add_permits(1);
    }

    /// Polls `borrow` once, which must bring it to the armed gate, and drops
    /// it there, in the middle of its store call.
    pub fn drop_at_gate<F: Future>(&self, borrow: F) {
        let mut borrow = std::pin::pin!(borrow);
        let polled = borrow
            .as_mut()
            .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()));
        assert!(polled.is_pending(), "the borrow finished before the gate");
        assert!(
            self.armed.lock().is_none(),
            "the borrow did not reach the gate"
        );
    }

    /// Yields until [`quiet`](GatedStore::quiet) on two checks in a row,
    /// with yields between: detached clean-up makes its store calls one
    /// after the other, and a single check could fall between two of them.
    pub async fn until_quiet(&self) {
        let mut checks = 0;
        while checks < 2 {
            checks = if self.quiet() { checks + 1 } else { 0 };
            for _ in 0..20 {
                tokio::task::yield_now().await;
            }
        }
    }

    /// The number of calls inside the store right now, held ones included.
    pub fn busy(&self) -> usize {
        self.busy.load(Ordering::SeqCst)
    }

    /// Whether nothing runs inside the store but the call held at the gate,
    /// if any: the clean-up that dropped calls left behind has run, and a
    /// released call has left the store.
    pub fn quiet(&self) -> bool {
        self.busy() == self.held.load(Ordering::SeqCst)
    }

    async fn hold(&self) {
        self.held.fetch_add(1, Ordering::SeqCst);
        self.caught.notify_one();
        self.gate
            .acquire()
            .await
            .expect("the gate is never closed")
            .forget();
    }

    async fn gated<T>(
        &self,
        call: impl Future<Output = Result<T>>,
        granted: fn(&T) -> bool,
    ) -> Result<T> {
        let _busy = Busy::enter(&self.busy);
        if self.take_if(Stop::BeforeCall) {
            self.hold().await;
        }
        let out = call.await;
        if out.as_ref().is_ok_and(granted) && self.take_if(Stop::AfterGrant) {
            self.hold().await;
        }
        out
    }

    fn take_if(&self, stop: Stop) -> bool {
        let mut armed = self.armed.lock();
        let hit = *armed == Some(stop);
        if hit {
            *armed = None;
        }
        hit
    }

    async fn through<T>(&self, call: impl Future<Output = T>) -> T {
        let _busy = Busy::enter(&self.busy);
        call.await
    }
}

/// Counts a call as inside the store until dropped, even if the call's
/// future is dropped midway.
struct Busy<'a>(&'a AtomicUsize);

impl<'a> Busy<'a> {
    fn enter(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Self(count)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl fmt::Debug for GatedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GatedStore")
            .field("inner", &self.inner)
            .field("armed", &*self.armed.lock())
            .field("busy", &self.busy())
            .finish()
    }
}

#[async_trait]
impl Store for GatedStore {
    fn parts(&self) -> crate::store::Parts<'_> {
        // No in-place answers: every call goes through this wrapper.
        crate::store::Parts {
            in_place: None,
            ..self.inner.parts()
        }
    }
    async fn unbind(&self, pool: PoolId, lease: LeaseId) -> Result<bool> {
        self.through(self.inner.unbind(pool, lease)).await
    }
    async fn register(&self, pool: PoolId, count: u32) -> Result<PoolState> {
        self.through(self.inner.register(pool, count)).await
    }
    async fn inspect(&self, pool: PoolId) -> Result<PoolState> {
        let _busy = Busy::enter(&self.busy);
        let out = self.inner.inspect(pool).await;
        if out.is_ok() && self.take_if(Stop::AfterInspect) {
            self.hold().await;
        }
        out
    }
    async fn set_draining(&self, pool: PoolId, draining: bool) -> Result<PoolState> {
        self.through(self.inner.set_draining(pool, draining)).await
    }
    async fn delete(&self, pool: PoolId) -> Result<bool> {
        self.through(self.inner.delete(pool)).await
    }
    async fn try_borrow(&self, request: &BorrowRequest) -> Result<TryBorrow> {
        self.gated(self.inner.try_borrow(request), |answer| {
            matches!(answer, TryBorrow::Granted { .. })
        })
        .await
    }
    async fn try_borrow_all(&self, requests: &[BorrowRequest]) -> Result<TryBorrowAll> {
        self.gated(self.inner.try_borrow_all(requests), |answer| {
            matches!(answer, TryBorrowAll::Granted { .. })
        })
        .await
    }
    async fn return_lease(&self, pool: PoolId, lease: LeaseId) -> Result<bool> {
        self.through(self.inner.return_lease(pool, lease)).await
    }
    async fn return_held(&self, lease: Lease) -> Result<bool> {
        self.through(self.inner.return_held(lease)).await
    }
    async fn renew(&self, pool: PoolId, lease: LeaseId, ttl: Duration) -> Result<Option<Lease>> {
        self.through(self.inner.renew(pool, lease, ttl)).await
    }
    async fn holders(&self, pool: PoolId) -> Result<Vec<Holder>> {
        self.through(self.inner.holders(pool)).await
    }
    async fn force_return(&self, pool: PoolId, at: u32) -> Result<Option<Holder>> {
        self.through(self.inner.force_return(pool, at)).await
    }
    async fn place(&self, pool: PoolId, waiter: WaiterId) -> Result<Option<u64>> {
        self.through(self.inner.place(pool, waiter)).await
    }
    async fn leave_queue(&self, pool: PoolId, waiter: WaiterId) -> Result<()> {
        self.through(self.inner.leave_queue(pool, waiter)).await
    }
    async fn queue(&self, pool: PoolId) -> Result<Vec<crate::QueuedPlace>> {
        self.inner.queue(pool).await
    }
    async fn pools(&self, after: Option<PoolId>, limit: u32) -> Result<Vec<crate::PoolState>> {
        self.inner.pools(after, limit).await
    }
}
