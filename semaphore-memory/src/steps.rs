//! One pool's borrow and return steps, made under the pool's lock with
//! what every pool of the store shares: the token counter, this process's
//! waiters and the clock. The store ([`MemoryStore`](crate::MemoryStore))
//! and a pool's own answers ([`Bound`](crate::bound::Bound)) both run them.

use crossbeam_utils::CachePadded;
use parking_lot::{Mutex, RwLock};
use semaphore_core::store::{BorrowRequest, Changes, SlotTable, TryBorrow, UnixMs};
use semaphore_core::{Clock, Error, LeaseId, PoolId, Result};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// One pool's slots, under the pool's own lock; `None` while the pool is
/// deleted, so that a call that found the entry just before a delete, or
/// a handle that keeps the entry ([`Bound`](crate::bound::Bound)), sees
/// the pool gone.
pub(crate) type Shard = Mutex<Option<SlotTable>>;

/// The pools by id, in id order (a listing reads a page of them in time
/// proportional to the page; rule "Listing pools"). The map's lock is
/// written only to add or remove a pool's entry, and read (shared)
/// through each call on one pool looked up by id; a call that holds both
/// takes the map's first. A handle's calls skip the lookup
/// ([`InPlace::bind`](semaphore_core::store::InPlace::bind)). Its word has
/// a cache line of its own, so that threads on different pools do not
/// also fight over the fields beside it.
pub(crate) type Pools = CachePadded<RwLock<std::collections::BTreeMap<PoolId, Arc<Shard>>>>;

/// What every pool's step reads or writes beside its own slots.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The last token granted, by any pool, on a cache line of its own:
    /// every grant writes it.
    pub(crate) last_token: CachePadded<AtomicU64>,
    pub(crate) changes: Changes,
    pub(crate) clock: Arc<dyn Clock>,
}

impl Shared {
    /// The deciding clock's reading for one step, to whole milliseconds
    /// (rule "Time": this process's clock decides for the memory store).
    pub(crate) fn now(&self) -> UnixMs {
        self.clock.now_ms()
    }

    /// A token above every token granted before, by any pool. Taken
    /// under the granting pool's lock, so a pool's tokens grow in the
    /// order of its grants.
    pub(crate) fn next_token(&self) -> u64 {
        self.last_token.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// When the borrower asking came, to order it after the held places
    /// that came before it: its queued borrower's arrival, or the end of
    /// the line for one that has not queued.
    pub(crate) fn arrival(&self, request: &BorrowRequest) -> u64 {
        request
            .waiter
            .and_then(|waiter| self.changes.arrival_of(request.pool, waiter))
            .unwrap_or(u64::MAX)
    }

    /// `try_borrow` on the pool's slots `table`, locked, at `now`.
    #[inline]
    pub(crate) fn borrow(
        &self,
        table: &mut SlotTable,
        request: &BorrowRequest,
        now: UnixMs,
    ) -> Result<TryBorrow> {
        if table.draining() {
            if request.hold.is_some() {
                // A held place keeps its turn through the drain (R11):
                // taken or refreshed, and refused (a draining table grants
                // nothing).
                let _ = self.poll_place(table, request, now);
            }
            return Err(Error::Draining { pool: request.pool });
        }
        if request.key.is_some() && table.key_reused(request, now) {
            return Err(Error::KeyReused { pool: request.pool });
        }
        if request.hold.is_some() {
            return Ok(self.poll_place(table, request, now));
        }
        // A queued borrower asks only as its queue's head; one that is no
        // longer the head (a raise of the count brought back a borrower
        // ahead of it) waits its turn again.
        if let Some(waiter) = request.waiter
            && self.changes.passed_over(request.pool, waiter)
        {
            return Ok(TryBorrow::Exhausted { next_expiry: None });
        }
        let arrival = self.arrival(request);
        Ok(table.grant_in_turn(request, now, arrival, || self.next_token()))
    }

    /// A held place's poll on the pool's slots `table`, locked, at `now`,
    /// served in its turn among this process's borrowers.
    fn poll_place(&self, table: &mut SlotTable, request: &BorrowRequest, now: UnixMs) -> TryBorrow {
        table.poll_place(
            request,
            now,
            |arrival| self.changes.ahead_of(request.pool, arrival).1,
            || self.changes.arrival(),
            || self.next_token(),
        )
    }

    /// Returns lease `lease` of `pool` to its slots `table`, locked, at
    /// `now`;
    /// found at its lowest position `lowest` when the caller has the
    /// lease, by its id otherwise. The freed slot goes straight to this
    /// process's head waiter, in the same step ([`Changes::hand_off`]).
    #[inline]
    pub(crate) fn give_back(
        &self,
        table: &mut SlotTable,
        pool: PoolId,
        lease: LeaseId,
        lowest: Option<u32>,
        now: UnixMs,
    ) -> bool {
        let returned = match lowest {
            Some(lowest) => table.release_at(lease, lowest, now),
            None => table.release(lease, now),
        };
        if returned && self.changes.has_waiters() {
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
    }
}
