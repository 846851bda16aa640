//! [`MemoryStore`]: pools in this process's memory.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use crossbeam_utils::CachePadded;
use parking_lot::MutexGuard;
use semaphore_core::store::{
    BorrowRequest, Changes, InPlace, Parts, SlotTable, Store, TryBorrow, TryBorrowAll, UnixMs,
    WaiterId, async_trait, page_start,
};

use crate::bound::Bound;
use crate::steps::{Pools, Shard, Shared};
use semaphore_core::{
    Clock, Error, Holder, Lease, LeaseId, PoolId, PoolState, QueuedPlace, Result, SystemClock,
};

/// A [`Store`] in this process's memory, for an in-process concurrency
/// limiter. No I/O; nothing survives the process.
///
/// Each pool has a mutex of its own, and each primitive runs under the
/// mutex of the pool it touches (a multi-pool borrow takes its pools' in
/// id order), so it is atomic, completes without ever yielding,
/// and never waits for work on another pool; it never fails with
/// [`Error::Storage`]. Slots are kept in the core's [`SlotTable`];
/// tokens come from one store-wide atomic counter, so they grow across
/// pools and across delete and register again.
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
    /// The pools, each under its own lock.
    pools: Arc<Pools>,
    /// What every pool's step shares: shared with the pools' own answers
    /// that handles keep ([`InPlace::bind`]).
    shared: Arc<Shared>,
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
            pools: Arc::default(),
            shared: Arc::new(Shared {
                last_token: CachePadded::new(AtomicU64::new(0)),
                changes: Changes::new(),
                clock,
            }),
        }
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    fn now(&self) -> UnixMs {
        self.shared.now()
    }

    /// `try_borrow`, which never waits: the store offers it both ways.
    fn borrow_in_place(&self, request: &BorrowRequest) -> Result<TryBorrow> {
        let now = self.now();
        self.with_table(request.pool, |table| {
            self.shared.borrow(table, request, now)
        })?
    }

    /// The pools' entries, kept or not, for tests of memory use.
    #[cfg(test)]
    pub(crate) fn entries(&self) -> usize {
        self.pools.read().len()
    }

    /// The pool's shard, if registered.
    fn shard(&self, pool: PoolId) -> Option<Arc<Shard>> {
        self.pools.read().get(&pool).cloned()
    }

    /// Runs `f` on the pool's slots under its lock; `PoolNotFound` if it
    /// is not registered.
    fn with_table<T>(&self, pool: PoolId, f: impl FnOnce(&mut SlotTable) -> T) -> Result<T> {
        // Under the map's read lock, with no `Arc` taken: lock order is
        // always the map, then a pool.
        let pools = self.pools.read();
        let shard = pools.get(&pool).ok_or_else(|| not_found(pool))?;
        let mut table = shard.lock();
        table.as_mut().map(f).ok_or_else(|| not_found(pool))
    }

    /// `return_lease`, which never waits: the store offers it both ways.
    /// Returns lease `lease` of `pool`, found at its lowest position
    /// `lowest` when the caller has the lease, by its id otherwise.
    fn return_in_place(&self, pool: PoolId, lease: LeaseId, lowest: Option<u32>) -> bool {
        let now = self.shared.now();
        self.with_table(pool, |table| {
            self.shared.give_back(table, pool, lease, lowest, now)
        })
        .unwrap_or(false)
    }
}

/// The slots of `pool` among `tables`, locked in the order of `ids`.
fn table<'a>(
    tables: &'a mut [Option<MutexGuard<'_, Option<SlotTable>>>],
    ids: &[PoolId],
    pool: PoolId,
) -> Option<&'a mut SlotTable> {
    let index = ids.binary_search(&pool).ok()?;
    tables[index].as_mut()?.as_mut()
}

/// The state of `pool`, whose slots are `table`, at `now`.
fn state(pool: PoolId, table: &mut SlotTable, now: UnixMs) -> PoolState {
    PoolState::new(pool, table.count(), table.in_use(now))
        .with_draining(table.draining())
        .with_queued(table.queued(now))
}

fn not_found(pool: PoolId) -> Error {
    Error::PoolNotFound { pool }
}

#[async_trait]
impl Store for MemoryStore {
    fn parts(&self) -> Parts<'_> {
        Parts {
            clock: &*self.shared.clock,
            changes: &self.shared.changes,
            // None: the holder of every lease is this process.
            session: None,
            max_ttl: Duration::MAX,
            in_place: Some(self),
        }
    }

    async fn register(&self, pool: PoolId, count: u32) -> Result<PoolState> {
        let now = self.now();
        let set = |table: &mut SlotTable| {
            table.set_count(count);
            // In the count's own step: a waiter for more slots than the
            // count is set aside, one the count now suits is owed the
            // slots before anyone queued after it.
            self.shared.changes.weigh(pool, count);
            state(pool, table, now)
        };
        let state = match self.with_table(pool, set) {
            Ok(state) => state,
            Err(_) => {
                let mut pools = self.pools.write();
                let shard = pools.entry(pool).or_default();
                let mut table = shard.lock();
                set(table.get_or_insert_with(SlotTable::default))
            }
        };
        Ok(state)
    }

    async fn inspect(&self, pool: PoolId) -> Result<PoolState> {
        let now = self.now();
        self.with_table(pool, |table| state(pool, table, now))
    }

    async fn set_draining(&self, pool: PoolId, draining: bool) -> Result<PoolState> {
        let now = self.now();
        let state = self.with_table(pool, |table| {
            table.set_draining(draining);
            state(pool, table, now)
        })?;
        Ok(state)
    }

    /// A handle that keeps the pool's entry ([`InPlace::bind`]) keeps it
    /// in the map, empty, until the pool is registered again or the last
    /// such handle lets go.
    async fn delete(&self, pool: PoolId) -> Result<bool> {
        let mut pools = self.pools.write();
        let Some(shard) = pools.get(&pool) else {
            return Ok(false);
        };
        let existed = shard.lock().take().is_some();
        if Arc::strong_count(shard) == 1 {
            pools.remove(&pool);
        }
        Ok(existed)
    }

    async fn try_borrow(&self, request: &BorrowRequest) -> Result<TryBorrow> {
        self.borrow_in_place(request)
    }

    async fn try_borrow_all(&self, requests: &[BorrowRequest]) -> Result<TryBorrowAll> {
        // Lock each pool once, in id order, so that two multi-pool borrows
        // never wait for each other's locks in a cycle.
        let mut ids: Vec<PoolId> = requests.iter().map(|r| r.pool).collect();
        ids.sort_unstable();
        ids.dedup();
        let shards: Vec<Option<Arc<Shard>>> = ids.iter().map(|id| self.shard(*id)).collect();
        let mut tables: Vec<Option<MutexGuard<'_, Option<SlotTable>>>> = shards
            .iter()
            .map(|shard| shard.as_ref().map(|shard| shard.lock()))
            .collect();
        for request in requests {
            match table(&mut tables, &ids, request.pool) {
                None => return Err(not_found(request.pool)),
                Some(t) if t.draining() => return Err(Error::Draining { pool: request.pool }),
                Some(_) => {}
            }
        }
        // Check every pool before granting any, so that a refusal costs no
        // token and writes nothing; one reading of the clock for the step.
        let now = self.now();
        for request in requests.iter().filter(|r| r.key.is_some()) {
            if let Some(t) = table(&mut tables, &ids, request.pool)
                && t.key_reused(request, now)
            {
                return Err(Error::KeyReused { pool: request.pool });
            }
        }
        // A queued borrower asks only as the head of each of its queues; one
        // that a raise of a count passed over since it
        // checked its turn waits again, as a single-pool borrower does.
        let passed_over = |r: &BorrowRequest| {
            r.waiter
                .is_some_and(|waiter| self.shared.changes.passed_over(r.pool, waiter))
        };
        if requests.iter().any(passed_over) {
            return Ok(TryBorrowAll::Exhausted { next_expiry: None });
        }
        let mut blocked = Vec::new();
        for request in requests {
            let Some(table) = table(&mut tables, &ids, request.pool) else {
                continue;
            };
            let arrival = self.shared.arrival(request);
            if !table.can_grant_in_turn(request, now, arrival) {
                blocked.push(table.next_change());
            }
        }
        let mut leases: Vec<Lease> = Vec::with_capacity(requests.len());
        if blocked.is_empty() {
            for request in requests {
                let Some(table) = table(&mut tables, &ids, request.pool) else {
                    break;
                };
                match table.grant(request, now, || self.shared.next_token()) {
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
                && let Some(table) = table(&mut tables, &ids, lease.pool)
            {
                table.release(lease.id, now);
            }
        }
        Ok(TryBorrowAll::refused(blocked))
    }

    async fn return_lease(&self, pool: PoolId, lease: LeaseId) -> Result<bool> {
        Ok(self.return_in_place(pool, lease, None))
    }

    async fn return_held(&self, lease: Lease) -> Result<bool> {
        Ok(self.return_in_place(lease.pool, lease.id, Some(lease.position)))
    }

    async fn renew(&self, pool: PoolId, lease: LeaseId, ttl: Duration) -> Result<Option<Lease>> {
        let now = self.now();
        let renewed = self.with_table(pool, |table| table.renew(pool, lease, now, ttl))?;
        Ok(renewed)
    }

    /// Nothing to unbind: a lease of this store lives in this process and
    /// ends with it. Whether it is active.
    async fn unbind(&self, pool: PoolId, lease: LeaseId) -> Result<bool> {
        let now = self.now();
        let active = self.with_table(pool, |table| {
            table
                .holders(pool, now)
                .iter()
                .any(|holder| holder.lease.id == lease)
        });
        match active {
            Err(semaphore_core::Error::PoolNotFound { .. }) => Ok(false),
            other => other,
        }
    }

    async fn holders(&self, pool: PoolId) -> Result<Vec<Holder>> {
        let now = self.now();
        self.with_table(pool, |table| table.holders(pool, now))
    }

    async fn force_return(&self, pool: PoolId, position: u32) -> Result<Option<Holder>> {
        let now = self.now();
        let ended = self.with_table(pool, |table| table.force_return(pool, position, now))?;
        Ok(ended)
    }

    /// The place of held place `waiter`, counting the held places and
    /// this process's borrowers ahead of it; `None` for any other waiter:
    /// this process's borrowers are in the core's queue
    /// ([`Pool::waiting`](semaphore_core::Pool::waiting) counts them).
    async fn place(&self, pool: PoolId, waiter: WaiterId) -> Result<Option<u64>> {
        let now = self.now();
        let held = self.with_table(pool, |table| table.held_place(waiter, now));
        let Some((index, arrival)) = held.ok().flatten() else {
            return Ok(None);
        };
        let (in_process, _) = self.shared.changes.ahead_of(pool, arrival);
        Ok(Some((index + in_process + 1) as u64))
    }

    /// Drops held place `waiter`, if any; this process's borrowers leave
    /// the core's queue by themselves.
    async fn leave_queue(&self, pool: PoolId, waiter: WaiterId) -> Result<()> {
        let _ = self.with_table(pool, |table| table.leave_place(waiter));
        Ok(())
    }

    async fn pools(&self, after: Option<PoolId>, limit: u32) -> Result<Vec<PoolState>> {
        let Some(start) = page_start(after) else {
            return Ok(Vec::new());
        };
        let now = self.now();
        let pools = self.pools.read();
        // An entry kept by a handle after its pool's delete has no table:
        // it is skipped, and there are at most as many as such handles.
        Ok(pools
            .range(start..)
            .filter_map(|(&id, shard)| shard.lock().as_mut().map(|t| state(id, t, now)))
            .take(limit as usize)
            .collect())
    }

    async fn queue(&self, pool: PoolId) -> Result<Vec<QueuedPlace>> {
        let now = self.now();
        Ok(self
            .with_table(pool, |table| table.queue(now))
            .unwrap_or_default())
    }
}

/// Every answer of this store is made under a mutex, without I/O.
impl InPlace for MemoryStore {
    fn try_borrow(&self, request: &BorrowRequest) -> Result<TryBorrow> {
        self.borrow_in_place(request)
    }

    fn return_held(&self, lease: &Lease) -> Result<bool> {
        Ok(self.return_in_place(lease.pool, lease.id, Some(lease.position)))
    }

    /// The pool's entry, kept with what every step shares: the handle then
    /// locks the pool without looking it up in the map.
    fn bind(&self, pool: PoolId) -> Option<Arc<dyn InPlace>> {
        let shard = self.pools.read().get(&pool).cloned()?;
        Some(Arc::new(Bound {
            pool,
            shard: Some(shard),
            pools: self.pools.clone(),
            shared: self.shared.clone(),
        }))
    }
}

#[cfg(test)]
mod future_size {
    use std::sync::Arc;
    use std::time::Duration;

    use semaphore_core::{Pool, PoolId};

    use crate::MemoryStore;

    /// Pay for what you use: a borrow's future carries the common path
    /// (a slot free, nobody queued, answered in place) and a box for the
    /// rest, not the waiting machinery's state, so that it stays small to
    /// move and to keep in a task.
    #[test]
    fn a_borrow_future_is_at_most_512_bytes() {
        let pool = Pool::new(Arc::new(MemoryStore::new()), PoolId::from_name("size"));
        let ttl = Duration::from_secs(30);
        let borrow = pool.borrow(ttl, Duration::from_secs(1));
        let owned = pool.borrow_owned(ttl, Duration::from_secs(1));
        let (borrow, owned) = (size_of_val(&borrow), size_of_val(&owned));
        assert!(borrow <= 512, "borrow's future is {borrow} bytes");
        assert!(owned <= 512, "borrow_owned's future is {owned} bytes");
    }
}
