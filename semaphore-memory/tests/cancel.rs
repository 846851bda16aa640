//! R12 at the step where it is hardest: a borrow dropped while the store is
//! granting. `GatedStore` holds `try_borrow` at a gate, so the test drops
//! the borrow while the call is in flight, then lets the store grant.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime};

use semaphore_memory::{
    BorrowOptions, BorrowRequest, Changes, Clock, Holder, Lease, LeaseId, ManualClock, MemoryStore,
    Pool, PoolId, PoolState, Result, Store, TryBorrow, TryBorrowAll, WaiterId, async_trait,
};
use tokio::sync::Semaphore;

#[derive(Debug)]
struct GatedStore {
    inner: MemoryStore,
    /// One permit lets one `try_borrow` through.
    gate: Semaphore,
    /// Leases this store has ended through `return_lease`.
    returned: AtomicU32,
}

#[async_trait]
impl Store for GatedStore {
    fn clock(&self) -> &dyn Clock {
        self.inner.clock()
    }
    fn changes(&self) -> &Changes {
        self.inner.changes()
    }
    async fn register(&self, pool: PoolId, count: u32, now: SystemTime) -> Result<PoolState> {
        self.inner.register(pool, count, now).await
    }
    async fn inspect(&self, pool: PoolId, now: SystemTime) -> Result<PoolState> {
        self.inner.inspect(pool, now).await
    }
    async fn delete(&self, pool: PoolId) -> Result<bool> {
        self.inner.delete(pool).await
    }
    async fn try_borrow(&self, request: &BorrowRequest) -> Result<TryBorrow> {
        self.gate.acquire().await.expect("gate open").forget();
        self.inner.try_borrow(request).await
    }
    async fn try_borrow_all(&self, requests: &[BorrowRequest]) -> Result<TryBorrowAll> {
        self.gate.acquire().await.expect("gate open").forget();
        self.inner.try_borrow_all(requests).await
    }
    async fn renew(
        &self,
        pool: PoolId,
        lease: LeaseId,
        now: SystemTime,
        until: SystemTime,
    ) -> Result<Option<Lease>> {
        self.inner.renew(pool, lease, now, until).await
    }
    async fn holders(&self, pool: PoolId, now: SystemTime) -> Result<Vec<Holder>> {
        self.inner.holders(pool, now).await
    }
    async fn force_return(&self, pool: PoolId, at: u32, now: SystemTime) -> Result<Option<Holder>> {
        self.inner.force_return(pool, at, now).await
    }
    async fn return_lease(&self, pool: PoolId, lease: LeaseId, now: SystemTime) -> Result<bool> {
        let returned = self.inner.return_lease(pool, lease, now).await?;
        if returned {
            self.returned.fetch_add(1, Ordering::SeqCst);
        }
        Ok(returned)
    }
    async fn leave_queue(&self, pool: PoolId, waiter: WaiterId) -> Result<()> {
        self.inner.leave_queue(pool, waiter).await
    }
}

fn gated() -> Arc<GatedStore> {
    Arc::new(GatedStore {
        inner: MemoryStore::with_clock(Arc::new(ManualClock::new())),
        gate: Semaphore::new(0),
        returned: AtomicU32::new(0),
    })
}

#[tokio::test]
async fn grant_landing_after_the_borrow_was_dropped_is_returned_at_once() {
    let store = gated();
    let pool = Pool::new(store.clone(), PoolId::from_name("gated"));
    pool.register(1).await.unwrap();

    let mut borrow = tokio_test::task::spawn(pool.borrow(Duration::from_secs(60), Duration::ZERO));
    tokio_test::assert_pending!(borrow.poll(), "held at the gate, inside the store call");
    drop(borrow);

    // The store now grants the dropped borrow's request...
    store.gate.add_permits(1);
    // ...and the core returns that lease at once, on a spawned task.
    while store.returned.load(Ordering::SeqCst) != 1 {
        tokio::task::yield_now().await;
    }
    assert_eq!(pool.inspect().await.unwrap().in_use, 0);

    store.gate.add_permits(1);
    let next = pool.try_borrow(Duration::from_secs(60)).await.unwrap();
    assert_eq!(next.position, 0);
    assert_eq!(
        next.token, 2,
        "token 1 went to the dropped borrow, and came back"
    );
}

/// A retry with an idempotency key, dropped while the store answers it with
/// the key's lease, must not return that lease: it is the first borrow's,
/// and the caller may still be using it.
#[tokio::test]
async fn dropped_keyed_retry_does_not_return_the_lease_it_was_answered_with() {
    let store = gated();
    let pool = Pool::new(store.clone(), PoolId::from_name("gated"));
    pool.register(1).await.unwrap();
    let ttl = Duration::from_secs(60);
    let key = || BorrowOptions::new().key("job-9");
    store.gate.add_permits(1);
    let first = pool
        .borrow_with(ttl, Duration::ZERO, key())
        .await
        .unwrap()
        .forget();

    let mut retry = tokio_test::task::spawn(pool.borrow_with(ttl, Duration::ZERO, key()));
    tokio_test::assert_pending!(retry.poll(), "held at the gate, inside the store call");
    drop(retry);
    store.gate.add_permits(1);
    // The detached call runs to its end once the gate lets it through.
    while store.gate.available_permits() != 0 {
        tokio::task::yield_now().await;
    }
    tokio::task::yield_now().await;
    assert_eq!(store.returned.load(Ordering::SeqCst), 0);
    assert_eq!(pool.holders().await.unwrap()[0].lease, first);
}
