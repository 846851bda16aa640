//! [`MemoryStore`]: pools in this process's memory.

use std::sync::Arc;
use std::time::SystemTime;

use parking_lot::Mutex;
use semaphore_core::{
    BorrowRequest, Changes, Clock, Error, Holder, Lease, LeaseId, PoolId, PoolState, Result,
    SlotTable, Store, SystemClock, TryBorrow, TryBorrowAll, WaiterId, async_trait,
};

/// A [`Store`] in this process's memory, for an in-process concurrency
/// limiter. No I/O; nothing survives the process.
///
/// Each primitive runs under one mutex, so it is atomic (R10, R14) and
/// completes without ever yielding; it never fails with
/// [`Error::Storage`]. Slots are kept in the core's [`SlotTable`] (R6, R7);
/// tokens come from one store-wide counter, so they grow across pools and
/// across delete and register again (R9).
///
/// ```
/// use std::sync::Arc;
/// use semaphore_memory::{ManualClock, MemoryStore, Pool, PoolId};
///
/// let store = Arc::new(MemoryStore::new());
/// let pool = Pool::new(store.clone(), PoolId::from_name("a"));
/// // For tests: a clock that moves only when told to.
/// let clock = Arc::new(ManualClock::new());
/// let test_store = Arc::new(MemoryStore::with_clock(clock.clone()));
/// ```
#[derive(Debug)]
pub struct MemoryStore {
    state: Mutex<State>,
    changes: Changes,
    clock: Arc<dyn Clock>,
}

#[derive(Debug, Default)]
struct State {
    pools: foldhash::HashMap<PoolId, SlotTable>,
    /// The last token granted, by any pool.
    last_token: u64,
}

impl MemoryStore {
    /// An empty store on the [`SystemClock`].
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SystemClock))
    }

    /// An empty store on `clock`; tests pass a
    /// [`ManualClock`](semaphore_core::ManualClock).
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Self {
            state: Mutex::default(),
            changes: Changes::new(),
            clock,
        }
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// `try_borrow`, which never waits: the store offers it both ways.
    fn borrow_in_place(&self, request: &BorrowRequest) -> Result<TryBorrow> {
        let mut state = self.state.lock();
        let State { pools, last_token } = &mut *state;
        let table = pools
            .get_mut(&request.pool)
            .ok_or_else(|| not_found(request.pool))?;
        Ok(table.grant(request, || {
            *last_token += 1;
            *last_token
        }))
    }

    /// `return_lease`, which never waits: the store offers it both ways.
    fn return_in_place(&self, pool: PoolId, lease: LeaseId, now: SystemTime) -> bool {
        let returned = self
            .state
            .lock()
            .pools
            .get_mut(&pool)
            .is_some_and(|table| table.release(lease, now));
        if returned {
            self.changes.notify(pool);
        }
        returned
    }
}

fn not_found(pool: PoolId) -> Error {
    Error::PoolNotFound { pool }
}

#[async_trait]
impl Store for MemoryStore {
    fn clock(&self) -> &dyn Clock {
        &*self.clock
    }

    fn changes(&self) -> &Changes {
        &self.changes
    }

    async fn register(&self, pool: PoolId, count: u32, now: SystemTime) -> Result<PoolState> {
        let state = {
            let mut state = self.state.lock();
            let table = state.pools.entry(pool).or_default();
            table.set_count(count);
            PoolState::new(pool, count, table.in_use(now))
        };
        self.changes.notify(pool);
        Ok(state)
    }

    async fn inspect(&self, pool: PoolId, now: SystemTime) -> Result<PoolState> {
        let mut state = self.state.lock();
        let table = state.pools.get_mut(&pool).ok_or_else(|| not_found(pool))?;
        Ok(PoolState::new(pool, table.count(), table.in_use(now)))
    }

    async fn delete(&self, pool: PoolId) -> Result<bool> {
        let existed = self.state.lock().pools.remove(&pool).is_some();
        self.changes.notify(pool);
        Ok(existed)
    }

    async fn try_borrow(&self, request: &BorrowRequest) -> Result<TryBorrow> {
        self.borrow_in_place(request)
    }

    fn try_borrow_now(&self, request: &BorrowRequest) -> Option<Result<TryBorrow>> {
        Some(self.borrow_in_place(request))
    }

    async fn try_borrow_all(&self, requests: &[BorrowRequest]) -> Result<TryBorrowAll> {
        let mut state = self.state.lock();
        let State { pools, last_token } = &mut *state;
        // Check every pool before granting any, so that a refusal costs no
        // token and writes nothing.
        let mut blocked = Vec::new();
        for request in requests {
            let table = pools
                .get_mut(&request.pool)
                .ok_or_else(|| not_found(request.pool))?;
            if !table.can_grant(request) {
                blocked.push(table.next_expiry());
            }
        }
        let mut leases: Vec<Lease> = Vec::with_capacity(requests.len());
        if blocked.is_empty() {
            for request in requests {
                let Some(table) = pools.get_mut(&request.pool) else {
                    break;
                };
                let next_token = || {
                    *last_token += 1;
                    *last_token
                };
                match table.grant(request, next_token) {
                    TryBorrow::Granted { lease } => leases.push(lease),
                    // Only if a pool is named twice: undo, refuse.
                    TryBorrow::Exhausted { next_expiry } => {
                        blocked.push(next_expiry);
                        break;
                    }
                }
            }
        }
        if blocked.is_empty() {
            return Ok(TryBorrowAll::Granted { leases });
        }
        for (lease, request) in leases.iter().zip(requests) {
            if lease.id == request.lease
                && let Some(table) = pools.get_mut(&lease.pool)
            {
                table.release(lease.id, request.now);
            }
        }
        let next_expiry = if blocked.contains(&None) {
            None
        } else {
            blocked.into_iter().flatten().max()
        };
        Ok(TryBorrowAll::Exhausted { next_expiry })
    }

    async fn return_lease(&self, pool: PoolId, lease: LeaseId, now: SystemTime) -> Result<bool> {
        Ok(self.return_in_place(pool, lease, now))
    }

    fn return_lease_now(
        &self,
        pool: PoolId,
        lease: LeaseId,
        now: SystemTime,
    ) -> Option<Result<bool>> {
        Some(Ok(self.return_in_place(pool, lease, now)))
    }

    async fn renew(
        &self,
        pool: PoolId,
        lease: LeaseId,
        now: SystemTime,
        expires_at: SystemTime,
    ) -> Result<Option<Lease>> {
        let renewed = self
            .state
            .lock()
            .pools
            .get_mut(&pool)
            .ok_or_else(|| not_found(pool))?
            .renew(pool, lease, now, expires_at);
        if renewed.is_some() {
            self.changes.notify(pool);
        }
        Ok(renewed)
    }

    async fn holders(&self, pool: PoolId, now: SystemTime) -> Result<Vec<Holder>> {
        let mut state = self.state.lock();
        let table = state.pools.get_mut(&pool).ok_or_else(|| not_found(pool))?;
        Ok(table.holders(pool, now))
    }

    async fn force_return(
        &self,
        pool: PoolId,
        position: u32,
        now: SystemTime,
    ) -> Result<Option<Holder>> {
        let ended = self
            .state
            .lock()
            .pools
            .get_mut(&pool)
            .ok_or_else(|| not_found(pool))?
            .force_return(pool, position, now);
        if ended.is_some() {
            self.changes.notify(pool);
        }
        Ok(ended)
    }

    /// A no-op: in one process the core's queue is the only queue.
    async fn leave_queue(&self, _pool: PoolId, _waiter: WaiterId) -> Result<()> {
        Ok(())
    }
}
