//! Slot allocation, defined once: the reference
//! [`lowest_free`] and [`SlotTable`], the in-process bookkeeping that
//! in-process stores call.

pub use reference::{lowest_free, lowest_free_n};

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use free::FreeSet;
use record::{Held, Slot};

use crate::clock::UnixMs;
use crate::keys::key_name;
use crate::{
    id::LeaseId, id::PoolId, lease::Holder, lease::Lease, lease::Positions, request::BorrowRequest,
    request::TryBorrow,
};

/// The slots of one pool, kept in memory: who holds which positions until
/// when, with the free positions indexed, so that the common path (a
/// grant of one free slot, a return by the lease's position) costs O(1)
/// and touches neither a map nor a heap.
///
/// Memory follows the slots held, never `count`: a table of count
/// `u32::MAX` with one lease costs what a table of count 1 does. Only
/// positions below the highest one held, or the first 64, are tracked
/// (the *high mark*);
/// free ones among them are a bitset, so the lowest is found a word at a
/// time (at most 16 words at the default `max_count` of 1000), and above the
/// high mark every position is free.
///
/// A lease of `n` slots holds the `n` lowest free positions, is found
/// by its lowest one, and counts `n` in `in_use`. A return or renewal
/// given that position ([`release_at`](SlotTable::release_at)) goes
/// straight to it; one given only the lease id looks through the
/// positions held, O(high mark).
///
/// It keeps held places too ([`BorrowRequest::hold`]): an in-process
/// store grants with [`grant_in_turn`](SlotTable::grant_in_turn) and polls
/// places with [`poll_place`](SlotTable::poll_place), so that a place is
/// served in its turn among this process's borrowers.
///
/// Expired leases are reaped at the start of every call that takes `now`,
/// so an expired lease never counts and its slots are the next ones
/// handed out. Reaping is lazy: the table keeps a moment before which no
/// lease expires (the earliest expiry granted since the last reap) and
/// looks through the leases only once `now` reaches it, so a reap costs
/// one comparison until a lease may have expired (amortized O(1) a
/// grant while leases are returned before their ttl). The table knows
/// nothing of tokens' origin: the store hands it the next token, which
/// must be store-wide increasing.
#[derive(Debug, Clone)]
pub struct SlotTable {
    count: u32,
    /// The pool grants nothing new while set.
    draining: bool,
    /// Indexed by position, up to the high mark: the highest held, or
    /// any of the first [`KEPT`]; may be above `count` after a lowering
    /// while those leases are active. Past [`KEPT`], never ends in `None`.
    slots: Vec<Option<Slot>>,
    /// Positions held by active leases: `in_use`.
    held: u32,
    /// Idempotency keys of active leases by name ([`key_name`]), to their
    /// lowest position.
    by_key: HashMap<Arc<str>, u32>,
    /// No active lease expires before it: the earliest expiry at the last
    /// reap, lowered by every grant and renewal since, in unix ms.
    /// `u64::MAX` (above every expiry) while no lease has been granted
    /// since a reap that left none.
    earliest: u64,
    /// Free positions below the high mark (`slots.len()`).
    free: FreeSet,
    /// Held places, for an in-process store ([`places`]).
    places: places::Places,
}

impl Default for SlotTable {
    /// A table of no slots.
    fn default() -> Self {
        Self {
            count: 0,
            draining: false,
            slots: Vec::new(),
            held: 0,
            by_key: HashMap::new(),
            earliest: u64::MAX,
            free: FreeSet::default(),
            places: places::Places::default(),
        }
    }
}

impl SlotTable {
    /// A table of `count` free slots.
    pub fn new(count: u32) -> Self {
        let mut table = Self::default();
        table.set_count(count);
        table
    }

    /// The number of slots.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Changes the number of slots. Lowering it revokes nothing: leases
    /// at or above the new count stay until returned or expired, and their
    /// positions are not handed out again.
    ///
    /// O(1), whatever `count` is: nothing is allocated per slot.
    pub fn set_count(&mut self, count: u32) {
        self.count = count;
    }

    /// Whether the pool drains: [`grant`](SlotTable::grant) then refuses.
    pub fn draining(&self) -> bool {
        self.draining
    }

    /// Starts or ends the pool's drain.
    pub fn set_draining(&mut self, draining: bool) {
        self.draining = draining;
    }

    /// Slots held by active leases at `now`, which may exceed
    /// `count` after a lowering.
    pub fn in_use(&mut self, now: impl Into<UnixMs>) -> u32 {
        self.reap(now.into());
        self.held
    }

    /// The earliest expiry among active leases, if any. O(high mark):
    /// asked when a borrow is refused, not on the common path.
    pub fn next_expiry(&self) -> Option<SystemTime> {
        self.earliest_expiry().map(UnixMs::to_system_time)
    }

    fn earliest_expiry(&self) -> Option<UnixMs> {
        self.leases().map(|(_, held)| held.expires_at).min()
    }

    /// The active leases (or those expired and not yet reaped), by lowest
    /// position.
    fn leases(&self) -> impl Iterator<Item = (u32, &Held)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(p, slot)| match slot {
                Some(Slot::Lease(held)) => Some((p as u32, held)),
                _ => None,
            })
    }

    /// The lowest position of lease `id`, if it holds any: O(high mark).
    fn lowest_of(&self, id: LeaseId) -> Option<u32> {
        self.leases()
            .find(|(_, held)| held.id == id)
            .map(|(p, _)| p)
    }

    /// Lowers [`earliest`](SlotTable::earliest) to `at`.
    #[inline]
    fn expires(&mut self, at: UnixMs) {
        self.earliest = self.earliest.min(at.get());
    }

    /// Grants the request's number of slots, the lowest free, if
    /// `in_use + slots <= count` at `now` (the store's reading of its
    /// clock, whole ms), for the request's ttl from `now`, taking the token
    /// from `next_token` only when it grants. A request whose key names an
    /// active lease gets that lease back, unchanged. A draining table
    /// grants nothing (its store answers [`Error::Draining`](crate::Error::Draining)).
    #[inline]
    pub fn grant(
        &mut self,
        request: &BorrowRequest,
        now: impl Into<UnixMs>,
        next_token: impl FnOnce() -> u64,
    ) -> TryBorrow {
        let now = now.into();
        self.reap(now);
        if self.draining {
            return TryBorrow::Exhausted { next_expiry: None };
        }
        if request.key.is_some() {
            match self.keyed(request) {
                Keyed::Same(lease) => return TryBorrow::Granted { lease },
                // Refused: a store answers it with `Error::KeyReused` first
                // (`key_reused`).
                Keyed::Reused => return TryBorrow::Exhausted { next_expiry: None },
                Keyed::No => {}
            }
        }
        let Some(positions) = self.take_lowest_free(request.slots) else {
            return TryBorrow::Exhausted {
                next_expiry: self.next_expiry(),
            };
        };
        let lowest = positions.lowest();
        self.held += positions.len() as u32;
        let held = Held {
            id: request.lease,
            positions,
            token: next_token(),
            expires_at: now.saturating_add(request.ttl),
            key: request.key.clone(),
            owner: request.owner.clone(),
        };
        let lease = held.lease(request.pool);
        if let Some(key) = held.key.as_deref() {
            self.by_key.insert(Arc::from(key_name(key)), lowest);
        }
        self.expires(held.expires_at);
        // The position was free (`None`): nothing to drop, and no call
        // of the drop glue of a whole slot to find that out.
        let vacant = self.slots[lowest as usize].replace(Slot::Lease(held));
        debug_assert!(vacant.is_none(), "granted a held position");
        std::mem::forget(vacant);
        TryBorrow::Granted { lease }
    }

    /// Whether [`grant`](SlotTable::grant) would grant `request` at `now`:
    /// its key names an active lease, or its slots are free. Reaps first.
    pub fn can_grant(&mut self, request: &BorrowRequest, now: impl Into<UnixMs>) -> bool {
        self.reap(now.into());
        !self.draining
            && match self.keyed(request) {
                Keyed::Same(_) => true,
                Keyed::Reused => false,
                Keyed::No => self.has_room(request.slots),
            }
    }

    /// Whether the request's key names an active lease granted under
    /// another stored key (another request's digest): the store answers
    /// [`Error::KeyReused`](crate::Error::KeyReused), and
    /// [`grant`](SlotTable::grant) grants nothing. Reaps first.
    pub fn key_reused(&mut self, request: &BorrowRequest, now: impl Into<UnixMs>) -> bool {
        self.reap(now.into());
        matches!(self.keyed(request), Keyed::Reused)
    }

    /// Frees the slots of lease `id` if it is active at `now`; `false`
    /// for an unknown, returned or expired lease. O(high mark): a caller
    /// that has the lease calls [`release_at`](SlotTable::release_at).
    pub fn release(&mut self, id: LeaseId, now: impl Into<UnixMs>) -> bool {
        self.reap(now.into());
        match self.lowest_of(id) {
            Some(lowest) => {
                self.vacate(lowest);
                true
            }
            None => false,
        }
    }

    /// [`release`](SlotTable::release) of lease `id` whose lowest
    /// position is `lowest` ([`Lease::position`]): O(1). `false` if
    /// `lowest` is not where lease `id` is held.
    #[inline]
    pub fn release_at(&mut self, id: LeaseId, lowest: u32, now: impl Into<UnixMs>) -> bool {
        self.reap(now.into());
        match self.held_at(lowest) {
            Some(held) if held.id == id || crate::sync::planted("table_frees_any") => {
                self.vacate(lowest);
                true
            }
            _ => false,
        }
    }

    /// Moves the expiry of lease `id` of pool `pool` to `ttl` after `now`
    /// if it is active at `now`, keeping positions, token and labels.
    pub fn renew(
        &mut self,
        pool: PoolId,
        id: LeaseId,
        now: impl Into<UnixMs>,
        ttl: Duration,
    ) -> Option<Lease> {
        let now = now.into();
        self.reap(now);
        let expires_at = now.saturating_add(ttl);
        let lowest = self.lowest_of(id)?;
        let held = self.held_at(lowest)?;
        held.expires_at = expires_at;
        let lease = held.lease(pool);
        self.expires(expires_at);
        Some(lease)
    }

    /// The active leases at `now`, by lowest position, as pool `pool`'s.
    pub fn holders(&mut self, pool: PoolId, now: impl Into<UnixMs>) -> Vec<Holder> {
        self.reap(now.into());
        self.slots
            .iter()
            .filter_map(|slot| match slot {
                Some(Slot::Lease(held)) => Some(held.holder(pool)),
                _ => None,
            })
            .collect()
    }

    /// Ends the lease holding `position` (one of its positions) if one
    /// is active at `now`, freeing all its slots; the lease it ended.
    pub fn force_return(
        &mut self,
        pool: PoolId,
        position: u32,
        now: impl Into<UnixMs>,
    ) -> Option<Holder> {
        self.reap(now.into());
        let lowest = match self.slots.get(position as usize)?.as_ref()? {
            Slot::Lease(_) => position,
            Slot::Part(lowest) => *lowest,
        };
        let holder = self.held_at(lowest)?.holder(pool);
        self.vacate(lowest);
        Some(holder)
    }

    #[inline]
    fn held_at(&mut self, lowest: u32) -> Option<&mut Held> {
        match self.slots.get_mut(lowest as usize)? {
            Some(Slot::Lease(held)) => Some(held),
            _ => None,
        }
    }

    /// The active lease whose key has the request's key's name, if any.
    fn keyed(&self, request: &BorrowRequest) -> Keyed {
        let Some(key) = &request.key else {
            return Keyed::No;
        };
        let Some(&lowest) = self.by_key.get(key_name(key)) else {
            return Keyed::No;
        };
        match self.slots.get(lowest as usize) {
            Some(Some(Slot::Lease(held))) if held.key.as_deref() == Some(&**key) => {
                Keyed::Same(held.lease(request.pool))
            }
            Some(Some(Slot::Lease(_))) => Keyed::Reused,
            _ => Keyed::No,
        }
    }

    /// Whether `n` more slots fit: `in_use + n <= count`. Then
    /// at least `n` positions below `count` are free.
    #[inline]
    fn has_room(&self, n: u32) -> bool {
        u64::from(self.held) + u64::from(n.max(1)) <= u64::from(self.count)
    }

    /// Takes the `n` lowest free positions below `count`, if `n` more
    /// slots fit: the first gaps below the high mark, then the high mark
    /// and up (raised to them); a position past the first is marked as
    /// part of the lease at the first.
    #[inline]
    fn take_lowest_free(&mut self, n: u32) -> Option<Positions> {
        if !self.has_room(n) {
            return None;
        }
        if n <= 1 {
            // The common path: one position, most often a gap.
            let p = match self.free.take_first() {
                Some(p) => p,
                None => {
                    self.slots.push(None);
                    self.slots.len() as u32 - 1
                }
            };
            return Some(Positions::one(p));
        }
        let high = self.slots.len() as u32;
        let positions: Vec<u32> = self.free.iter().chain(high..).take(n as usize).collect();
        let positions = Positions::new(positions)?;
        let (lowest, highest) = (positions.lowest(), positions[positions.len() - 1]);
        for &p in positions.iter() {
            if p < high {
                self.free.remove(p);
            }
        }
        while self.slots.len() <= highest as usize {
            self.slots.push(None);
        }
        for &p in &positions[1..] {
            self.slots[p as usize] = Some(Slot::Part(lowest));
        }
        Some(positions)
    }

    /// Ends the leases expired at `now`, once `now` reaches
    /// [`earliest`](SlotTable::earliest), which it then sets exactly.
    #[inline]
    fn reap(&mut self, now: UnixMs) {
        if self.earliest <= now.get() {
            self.reap_expired(now);
        }
    }

    #[cold]
    #[inline(never)]
    fn reap_expired(&mut self, now: UnixMs) {
        let expired: Vec<u32> = self
            .leases()
            .filter(|(_, held)| held.expires_at <= now)
            .map(|(p, _)| p)
            .collect();
        for lowest in expired {
            self.vacate(lowest);
        }
        self.earliest = self.earliest_expiry().map_or(u64::MAX, UnixMs::get);
    }

    /// Ends the lease whose lowest position is `lowest`: forgets it and
    /// its key, and frees its positions. Past [`KEPT`] positions, lowers
    /// the high mark past every free position at the top, so that memory
    /// shrinks back with the slots held (below it, the positions stay
    /// allocated: a pool's churn moves no memory).
    #[inline]
    fn vacate(&mut self, lowest: u32) {
        let Some(Some(Slot::Lease(held))) = self.slots.get(lowest as usize) else {
            return;
        };
        let n = held.positions.len() as u32;
        if n == 1 && held.key.is_none() {
            // The common path: one position, no key; dropped in place.
            self.slots[lowest as usize] = None;
            self.free.insert(lowest);
        } else if let Some(Slot::Lease(held)) = self.slots[lowest as usize].take() {
            if let Some(key) = held.key.as_deref() {
                self.by_key.remove(key_name(key));
            }
            for &p in held.positions.iter() {
                self.slots[p as usize] = None;
                self.free.insert(p);
            }
        }
        self.held -= n;
        if self.slots.len() > KEPT {
            while let Some(None) = self.slots.last() {
                self.slots.pop();
                self.free.remove(self.slots.len() as u32);
            }
            self.free.truncate(self.slots.len() as u32);
        }
    }
}

/// Positions a table keeps allocated when they free: one word of the
/// free bitset.
const KEPT: usize = 64;

mod free;
mod places;
mod record;
mod reference;

#[cfg(test)]
mod tests;

/// What a request's key finds among the active leases.
enum Keyed {
    /// No active lease has a key of its name.
    No,
    /// The lease granted under this very key: answered as it stands.
    Same(Lease),
    /// A lease granted under the name with another request digest.
    Reused,
}
