//! [`MemoryStore`]: pools in this process's memory.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;
use parking_lot::{Mutex, MutexGuard, RwLock};
use semaphore_core::store::{
    BorrowRequest, Changes, InPlace, SlotTable, Store, TryBorrow, TryBorrowAll, WaiterId,
    async_trait, truncate_ms,
};
use semaphore_core::{
    Clock, Error, Holder, Lease, LeaseId, PoolId, PoolState, Result, SystemClock,
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
    /// The pools. The map's lock is written only to add or remove a pool's
    /// entry, and read (shared) through each call on one pool; a call that
    /// holds both takes the map's first.
    /// Every call on any pool touches the lock's word and every grant the
    /// token counter: each has a cache line of its own, so that threads on
    /// different pools do not also fight over the fields beside them.
    pools: CachePadded<RwLock<foldhash::HashMap<PoolId, Arc<Shard>>>>,
    /// The last token granted, by any pool.
    last_token: CachePadded<AtomicU64>,
    changes: Changes,
    clock: Arc<dyn Clock>,
}

/// One pool's slots, under the pool's own lock; `None` once deleted, so
/// that a call that found the entry just before a delete sees the pool gone.
type Shard = Mutex<Option<SlotTable>>;

impl MemoryStore {
    /// An empty store on the [`SystemClock`].
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SystemClock))
    }

    /// An empty store on `clock`; tests pass a
    /// [`ManualClock`](semaphore_core::ManualClock).
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Self {
            pools: CachePadded::default(),
            last_token: CachePadded::new(AtomicU64::new(0)),
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
    /// The deciding clock's reading for one step, to whole milliseconds
    /// (rule "Time": this process's clock decides for the memory store).
    fn now(&self) -> SystemTime {
        truncate_ms(self.clock.now())
    }

    /// `try_borrow`, which never waits: the store offers it both ways.
    fn borrow_in_place(&self, request: &BorrowRequest) -> Result<TryBorrow> {
        let now = self.now();
        self.with_table(request.pool, |table| {
            if table.draining() {
                return Err(Error::Draining { pool: request.pool });
            }
            if request.key.is_some() && table.key_reused(request, now) {
                return Err(Error::KeyReused { pool: request.pool });
            }
            if request.hold.is_some() {
                // A held place's poll, served in its turn among this
                // process's borrowers.
                return Ok(table.poll_place(
                    request,
                    now,
                    |arrival| self.changes.ahead_of(request.pool, arrival).1,
                    || self.changes.arrival(),
                    || self.next_token(),
                ));
            }
            // A queued borrower asks only as its queue's head; one that
            // is no longer the head (a raise of the count brought back a
            // borrower ahead of it) waits its turn again.
            if let Some(waiter) = request.waiter
                && self.changes.passed_over(request.pool, waiter)
            {
                return Ok(TryBorrow::Exhausted { next_expiry: None });
            }
            let arrival = self.arrival(request);
            Ok(table.grant_in_turn(request, now, arrival, || self.next_token()))
        })?
    }

    /// When the borrower asking came, to order it after the held places
    /// that came before it: its queued borrower's arrival, or the end of
    /// the line for one that has not queued.
    fn arrival(&self, request: &BorrowRequest) -> u64 {
        request
            .waiter
            .and_then(|waiter| self.changes.arrival_of(request.pool, waiter))
            .unwrap_or(u64::MAX)
    }

    /// A token above every token granted before, by any pool. Taken
    /// under the granting pool's lock, so a pool's tokens grow in the
    /// order of its grants.
    fn next_token(&self) -> u64 {
        self.last_token.fetch_add(1, Ordering::Relaxed) + 1
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
    /// The freed slot goes straight to this process's head waiter, in the
    /// same step under the pool's lock ([`Changes::hand_off`]).
    /// Returns lease `lease` of `pool`, found at its lowest position
    /// `lowest` when the caller has the lease, by its id otherwise.
    fn return_in_place(&self, pool: PoolId, lease: LeaseId, lowest: Option<u32>) -> bool {
        // Not truncated for the release: expiries are whole milliseconds,
        // so one has passed at `now` exactly when it has at `now`'s whole
        // millisecond. A hand-off grants from the whole millisecond.
        let now = self.clock.now();
        self.with_table(pool, |table| {
            let returned = match lowest {
                Some(lowest) => table.release_at(lease, lowest, now),
                None => table.release(lease, now),
            };
            if returned && self.changes.has_waiters() {
                let now = truncate_ms(now);
                if table.has_places(now) {
                    // A held place may be owed the slot: everyone asks.
                    self.changes.notify(pool);
                } else {
                    let count = table.count();
                    self.changes.hand_off(pool, count, |request| {
                        table.grant(request, now, || self.next_token())
                    });
                }
            }
            returned
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
fn state(pool: PoolId, table: &mut SlotTable, now: SystemTime) -> PoolState {
    PoolState::new(pool, table.count(), table.in_use(now)).with_draining(table.draining())
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

    /// None: the holder of every lease is this process.
    fn session(&self) -> Option<&semaphore_core::Session> {
        None
    }
    fn max_ttl(&self) -> Duration {
        Duration::MAX
    }

    async fn register(&self, pool: PoolId, count: u32) -> Result<PoolState> {
        let now = self.now();
        let set = |table: &mut SlotTable| {
            table.set_count(count);
            // In the count's own step: a waiter for more slots than the
            // count is set aside, one the count now suits is owed the
            // slots before anyone queued after it.
            self.changes.weigh(pool, count);
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

    async fn delete(&self, pool: PoolId) -> Result<bool> {
        let removed = self.pools.write().remove(&pool);
        let existed = removed.is_some_and(|shard| shard.lock().take().is_some());
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
                .is_some_and(|waiter| self.changes.passed_over(r.pool, waiter))
        };
        if requests.iter().any(passed_over) {
            return Ok(TryBorrowAll::Exhausted { next_expiry: None });
        }
        let mut blocked = Vec::new();
        for request in requests {
            let Some(table) = table(&mut tables, &ids, request.pool) else {
                continue;
            };
            let arrival = self.arrival(request);
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
                match table.grant(request, now, || self.next_token()) {
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

    fn in_place(&self) -> Option<&dyn InPlace> {
        Some(self)
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
        let (in_process, _) = self.changes.ahead_of(pool, arrival);
        Ok(Some((index + in_process + 1) as u64))
    }

    /// Drops held place `waiter`, if any; this process's borrowers leave
    /// the core's queue by themselves.
    async fn leave_queue(&self, pool: PoolId, waiter: WaiterId) -> Result<()> {
        let _ = self.with_table(pool, |table| table.leave_place(waiter));
        Ok(())
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
