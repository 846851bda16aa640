//! Lost replies (rule "Lost replies"): a borrow attempt that was granted but
//! whose answer was lost. For stores that may lose answers (the networked
//! ones); each runs these cases with its own fixture.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use super::{Fixture, until_in_use, until_waiting};
use crate::store::{BorrowRequest, Store, TryBorrow, TryBorrowAll, WaiterId, async_trait};
use crate::{
    error::Error, error::Result, id::LeaseId, id::PoolId, lease::Holder, lease::Lease,
    lease::PoolState, pool::Pool,
};

const TTL: Duration = Duration::from_secs(3600);

/// A store whose next granted borrow answer is lost on the way back: the
/// grant stands in the store, and the caller gets a retryable storage
/// error instead. Returns can be made to fail too, before they reach the
/// store. It also counts the borrow attempts made without a place in the
/// queue ([`unplaced`](Self::unplaced)).
#[derive(Debug)]
pub struct LosingStore {
    inner: Arc<dyn Store>,
    lose_next: AtomicBool,
    /// How many borrow attempts came without a waiter.
    unplaced: AtomicUsize,
    /// How many borrow attempts with a waiter were answered.
    placed: AtomicUsize,
    /// How many of the next returns fail, unmade.
    fail_returns: AtomicUsize,
    /// How many returns failed so.
    failed_returns: AtomicUsize,
    /// The leases granted whose answers were lost.
    lost: Mutex<Vec<LeaseId>>,
}

impl LosingStore {
    /// Wraps `inner`; nothing is lost until [`lose_next`](Self::lose_next).
    pub fn new(inner: Arc<dyn Store>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            lose_next: AtomicBool::new(false),
            unplaced: AtomicUsize::new(0),
            placed: AtomicUsize::new(0),
            fail_returns: AtomicUsize::new(0),
            failed_returns: AtomicUsize::new(0),
            lost: Mutex::new(Vec::new()),
        })
    }

    /// The answer of the next borrow attempt that grants is lost.
    pub fn lose_next(&self) {
        self.lose_next.store(true, Ordering::SeqCst);
    }

    /// The next `n` returns fail with a retryable storage error, as if the
    /// store could not be reached, and are not made.
    pub fn fail_returns(&self, n: usize) {
        self.fail_returns.store(n, Ordering::SeqCst);
    }

    /// How many returns failed so.
    pub fn failed_returns(&self) -> usize {
        self.failed_returns.load(Ordering::SeqCst)
    }

    /// Whether this return fails unmade.
    fn fails(&self) -> Result<()> {
        let failing = self
            .fail_returns
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if failing.is_err() {
            return Ok(());
        }
        self.failed_returns.fetch_add(1, Ordering::SeqCst);
        Err(Error::Storage {
            operation: "return",
            retryable: true,
            source: "the store could not be reached (a test's fault)".into(),
        })
    }

    /// How many single-pool borrow attempts came without a waiter (a
    /// place in the queue) so far.
    pub fn unplaced(&self) -> usize {
        self.unplaced.load(Ordering::SeqCst)
    }

    /// How many single-pool borrow attempts with a waiter were answered
    /// (or failed) so far.
    pub fn placed(&self) -> usize {
        self.placed.load(Ordering::SeqCst)
    }

    /// The ids of the leases granted whose answers were lost.
    pub fn lost(&self) -> Vec<LeaseId> {
        self.lost.lock().clone()
    }
}

fn lost_reply() -> Error {
    Error::Storage {
        operation: "borrow",
        retryable: true,
        source: "the answer was lost on the way back (a test's fault)".into(),
    }
}

#[async_trait]
impl Store for LosingStore {
    fn parts(&self) -> crate::store::Parts<'_> {
        // No in-place answers: every call goes through this wrapper.
        crate::store::Parts {
            in_place: None,
            ..self.inner.parts()
        }
    }
    async fn register(&self, pool: PoolId, count: u32) -> Result<PoolState> {
        self.inner.register(pool, count).await
    }
    async fn inspect(&self, pool: PoolId) -> Result<PoolState> {
        self.inner.inspect(pool).await
    }
    async fn set_draining(&self, pool: PoolId, draining: bool) -> Result<PoolState> {
        self.inner.set_draining(pool, draining).await
    }
    async fn delete(&self, pool: PoolId) -> Result<bool> {
        self.inner.delete(pool).await
    }
    async fn try_borrow(&self, request: &BorrowRequest) -> Result<TryBorrow> {
        if request.waiter.is_none() {
            self.unplaced.fetch_add(1, Ordering::SeqCst);
        }
        let answer = self.inner.try_borrow(request).await;
        if request.waiter.is_some() {
            self.placed.fetch_add(1, Ordering::SeqCst);
        }
        let answer = answer?;
        if let TryBorrow::Granted { lease } = &answer
            && self.lose_next.swap(false, Ordering::SeqCst)
        {
            self.lost.lock().push(lease.id);
            return Err(lost_reply());
        }
        Ok(answer)
    }
    async fn try_borrow_all(&self, requests: &[BorrowRequest]) -> Result<TryBorrowAll> {
        let answer = self.inner.try_borrow_all(requests).await?;
        if let TryBorrowAll::Granted { leases } = &answer
            && self.lose_next.swap(false, Ordering::SeqCst)
        {
            self.lost.lock().extend(leases.iter().map(|l| l.id));
            return Err(lost_reply());
        }
        Ok(answer)
    }
    async fn return_lease(&self, pool: PoolId, lease: LeaseId) -> Result<bool> {
        self.fails()?;
        self.inner.return_lease(pool, lease).await
    }
    async fn return_held(&self, lease: Lease) -> Result<bool> {
        self.fails()?;
        self.inner.return_held(lease).await
    }
    async fn renew(&self, pool: PoolId, lease: LeaseId, ttl: Duration) -> Result<Option<Lease>> {
        self.inner.renew(pool, lease, ttl).await
    }
    async fn unbind(&self, pool: PoolId, lease: LeaseId) -> Result<bool> {
        self.inner.unbind(pool, lease).await
    }
    async fn holders(&self, pool: PoolId) -> Result<Vec<Holder>> {
        self.inner.holders(pool).await
    }
    async fn force_return(&self, pool: PoolId, position: u32) -> Result<Option<Holder>> {
        self.inner.force_return(pool, position).await
    }
    async fn place(&self, pool: PoolId, waiter: WaiterId) -> Result<Option<u64>> {
        self.inner.place(pool, waiter).await
    }
    async fn leave_queue(&self, pool: PoolId, waiter: WaiterId) -> Result<()> {
        self.inner.leave_queue(pool, waiter).await
    }
    async fn queue(&self, pool: PoolId) -> Result<Vec<crate::QueuedPlace>> {
        self.inner.queue(pool).await
    }
    async fn pools(&self, after: Option<PoolId>, limit: u32) -> Result<Vec<crate::PoolState>> {
        self.inner.pools(after, limit).await
    }
}

/// rule "Lost replies": a queued borrower whose granted attempt's answer
/// is lost asks again under the same lease id, and the store answers the
/// grant it made: the borrower holds that lease, and no lease is held by
/// nobody. Hand-offs are paused, so that the return wakes the borrower to
/// ask rather than granting it the slot itself (there would be no answer
/// of the borrower's own to lose: a race the case lost 1 time in CI).
pub async fn lost_reply_of_a_queued_borrow_is_answered_with_the_grant(f: Fixture) {
    f.store.changes().pause_hand_offs(true);
    let losing = LosingStore::new(f.store.clone());
    let pool = Pool::new(losing.clone(), PoolId::from_name("lost-queued"));
    pool.register(1).await.unwrap();
    let held = pool.try_borrow(TTL).await.unwrap();
    let waiter = {
        let pool = pool.clone();
        tokio::spawn(async move {
            pool.borrow(TTL, Duration::from_secs(60))
                .await
                .map(|g| g.forget())
        })
    };
    // Queued, and its place known to the store: the answer lost is that of
    // an attempt made from the queue, not of its first ask.
    until_waiting(&pool, 1).await;
    while !pool.store().changes().head_has_asked(pool.id()) {
        tokio::task::yield_now().await;
    }
    losing.lose_next();
    drop(held);
    let got = waiter.await.unwrap().expect("the borrower was served");
    assert_eq!(
        losing.lost(),
        vec![got.id],
        "served the grant whose answer was lost"
    );
    let state = pool.inspect().await.unwrap();
    assert_eq!(state.in_use, 1, "no lease is held by nobody");
    assert!(pool.return_lease(got.id).await.unwrap());
    f.store.changes().pause_hand_offs(false);
}

/// rule "Lost replies": a borrow whose first attempt's answer is lost
/// fails with the retryable error, and the grant it may have made is
/// returned: the slot comes back, not at the lease's ttl.
pub async fn lost_reply_of_a_first_attempt_is_returned(f: Fixture) {
    let losing = LosingStore::new(f.store.clone());
    let pool = Pool::new(losing.clone(), PoolId::from_name("lost-first"));
    pool.register(1).await.unwrap();
    losing.lose_next();
    let err = pool.try_borrow(TTL).await.unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    assert_eq!(losing.lost().len(), 1);
    until_in_use(&pool, 0).await;
    let next = pool.try_borrow(TTL).await.unwrap();
    assert_eq!(next.position, 0);
}

/// rule "Lost replies": a borrower that may wait, whose first attempt's
/// answer is lost, retries it (as a blip on any later attempt) under the
/// same lease id, and the store answers the grant it made: the borrower
/// holds that lease, not a second one, and does not fail.
pub async fn lost_reply_of_a_waiting_borrows_first_attempt_is_retried(f: Fixture) {
    let losing = LosingStore::new(f.store.clone());
    let pool = Pool::new(losing.clone(), PoolId::from_name("lost-first-waiting"));
    pool.register(1).await.unwrap();
    losing.lose_next();
    let got = pool
        .borrow(TTL, Duration::from_secs(60))
        .await
        .expect("the wait retried the lost first answer");
    assert_eq!(losing.lost(), vec![got.id], "served the grant it made");
    assert_eq!(
        pool.inspect().await.unwrap().in_use,
        1,
        "one lease, not two"
    );
}

/// rule "Lost replies": a guard dropped while its store cannot be
/// reached gives its slot back once the store can be reached again: a
/// return for a caller that is gone, failed with a retryable error, is
/// tried again, so the slot comes back, not at the lease's ttl (an hour).
pub async fn a_dropped_guards_failed_return_is_tried_again(f: Fixture) {
    let losing = LosingStore::new(f.store.clone());
    let pool = Pool::new(losing.clone(), PoolId::from_name("lost-return"));
    pool.register(1).await.unwrap();
    let held = pool.try_borrow(TTL).await.unwrap();
    losing.fail_returns(2);
    drop(held);
    until_in_use(&pool, 0).await;
    assert_eq!(losing.failed_returns(), 2, "both failures were seen");
}
