//! Slot allocation, defined once (SPEC R6, R7, R10): the reference
//! [`lowest_free`] and [`SlotTable`], the in-process bookkeeping that
//! in-process stores call.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use free::FreeSet;

use crate::clock::saturating_add;
use crate::{BorrowRequest, Holder, Lease, LeaseId, PoolId, TryBorrow};

/// The reference rule R6: the lowest position in `0..count` not in `held`,
/// or `None` when every one of them is held.
///
/// `held` lists the positions of the active leases (R7: expired leases are
/// not held); positions at or above `count` are ignored, since they are never
/// handed out. O(count). Stores may find the slot another way (in SQL, or
/// with [`SlotTable`]), but must agree with this function; the conformance
/// suite checks that they do.
///
/// ```
/// use semaphore_core::store::lowest_free;
/// assert_eq!(lowest_free(4, [0, 2]), Some(1));
/// assert_eq!(lowest_free(2, [0, 1, 5]), None);
/// assert_eq!(lowest_free(0, []), None);
/// ```
pub fn lowest_free(count: u32, held: impl IntoIterator<Item = u32>) -> Option<u32> {
    let mut taken = vec![false; count as usize];
    for p in held {
        if let Some(t) = taken.get_mut(p as usize) {
            *t = true;
        }
    }
    taken.iter().position(|t| !t).map(|p| p as u32)
}

#[derive(Debug, Clone)]
struct Held {
    id: LeaseId,
    token: u64,
    expires_at: SystemTime,
    key: Option<Arc<str>>,
    owner: Option<Arc<str>>,
}

impl Held {
    fn lease(&self, pool: PoolId, position: u32) -> Lease {
        Lease::new(self.id, pool, position, self.token, self.expires_at)
    }

    fn holder(&self, pool: PoolId, position: u32) -> Holder {
        let label = |l: &Option<Arc<str>>| l.as_deref().map(str::to_owned);
        Holder::new(
            self.lease(pool, position),
            label(&self.owner),
            label(&self.key),
        )
    }
}

/// The slots of one pool, kept in memory: who holds which position until
/// when, with the free positions and the expiries indexed so that a grant,
/// a return and a reap each cost O(log count).
///
/// Memory follows the leases held, never `count`: a table of count
/// `u32::MAX` with one lease costs what a table of count 1 does. Only
/// positions below the highest one held are tracked (the *high mark*);
/// free ones among them are a bitset, so the lowest is found a word at a
/// time (at most 16 words at the default `max_count` of 1000), and above the
/// high mark every position is free.
///
/// Expired leases are reaped at the start of every call that takes `now`,
/// so an expired lease never counts (R7) and its slot is the next one handed
/// out (R6). The table knows nothing of tokens' origin: the store hands it
/// the next token, which must be store-wide increasing (R9).
#[derive(Debug, Clone, Default)]
pub struct SlotTable {
    count: u32,
    /// Indexed by position, up to the highest held (the high mark), which
    /// may be above `count` after a lowering while those leases are active.
    /// Never ends in `None`.
    slots: Vec<Option<Held>>,
    by_id: foldhash::HashMap<LeaseId, u32>,
    /// Idempotency keys of held slots.
    by_key: HashMap<Arc<str>, u32>,
    /// `(expires_at, position)` of every held slot.
    expiries: BTreeSet<(SystemTime, u32)>,
    /// Free positions below the high mark (`slots.len()`).
    free: FreeSet,
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

    /// Changes the number of slots (R2). Lowering it revokes nothing: leases
    /// at or above the new count stay until returned or expired, and their
    /// positions are not handed out again.
    ///
    /// O(1), whatever `count` is: nothing is allocated per slot.
    pub fn set_count(&mut self, count: u32) {
        self.count = count;
    }

    /// Active leases at `now` (R7), which may exceed `count` after a lowering.
    pub fn in_use(&mut self, now: SystemTime) -> u32 {
        self.reap(now);
        self.by_id.len() as u32
    }

    /// The earliest expiry among active leases, if any.
    pub fn next_expiry(&self) -> Option<SystemTime> {
        self.expiries.first().map(|&(t, _)| t)
    }

    /// Grants the lowest free slot (R6) if `in_use < count` (R10) at `now`
    /// (the store's reading of its clock, whole ms), for the request's ttl
    /// from `now`, taking the token from `next_token` only when it grants. A
    /// request whose key names an active lease gets that lease back,
    /// unchanged.
    pub fn grant(
        &mut self,
        request: &BorrowRequest,
        now: SystemTime,
        next_token: impl FnOnce() -> u64,
    ) -> TryBorrow {
        self.reap(now);
        if let Some(lease) = self.keyed(request) {
            return TryBorrow::Granted { lease };
        }
        let Some(position) = self.lowest_free() else {
            return TryBorrow::Exhausted {
                next_expiry: self.next_expiry(),
            };
        };
        if position as usize == self.slots.len() {
            self.slots.push(None);
        } else {
            self.free.remove(position);
        }
        let held = Held {
            id: request.lease,
            token: next_token(),
            expires_at: saturating_add(now, request.ttl),
            key: request.key.clone(),
            owner: request.owner.clone(),
        };
        let lease = held.lease(request.pool, position);
        self.by_id.insert(held.id, position);
        if let Some(key) = &held.key {
            self.by_key.insert(key.clone(), position);
        }
        self.expiries.insert((held.expires_at, position));
        self.slots[position as usize] = Some(held);
        TryBorrow::Granted { lease }
    }

    /// Whether [`grant`](SlotTable::grant) would grant `request` at `now`:
    /// its key names an active lease, or a slot is free. Reaps first.
    pub fn can_grant(&mut self, request: &BorrowRequest, now: SystemTime) -> bool {
        self.reap(now);
        self.keyed(request).is_some() || self.lowest_free().is_some()
    }

    /// Frees the slot of lease `id` if it is active at `now` (R8); `false`
    /// for an unknown, returned or expired lease.
    pub fn release(&mut self, id: LeaseId, now: SystemTime) -> bool {
        self.reap(now);
        match self.by_id.get(&id) {
            Some(&position) => {
                self.vacate(position);
                true
            }
            None => false,
        }
    }

    /// Moves the expiry of lease `id` of pool `pool` to `ttl` after `now`
    /// if it is active at `now`, keeping position, token and labels.
    pub fn renew(
        &mut self,
        pool: PoolId,
        id: LeaseId,
        now: SystemTime,
        ttl: Duration,
    ) -> Option<Lease> {
        self.reap(now);
        let expires_at = saturating_add(now, ttl);
        let position = *self.by_id.get(&id)?;
        let held = self.slots[position as usize].as_mut()?;
        self.expiries.remove(&(held.expires_at, position));
        self.expiries.insert((expires_at, position));
        held.expires_at = expires_at;
        Some(held.lease(pool, position))
    }

    /// The active leases at `now`, by position, as pool `pool`'s.
    pub fn holders(&mut self, pool: PoolId, now: SystemTime) -> Vec<Holder> {
        self.reap(now);
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(p, held)| Some(held.as_ref()?.holder(pool, p as u32)))
            .collect()
    }

    /// Frees `position` if a lease holds it at `now`; the lease it held.
    pub fn force_return(&mut self, pool: PoolId, position: u32, now: SystemTime) -> Option<Holder> {
        self.reap(now);
        let holder = self
            .slots
            .get(position as usize)?
            .as_ref()?
            .holder(pool, position);
        self.vacate(position);
        Some(holder)
    }

    fn keyed(&self, request: &BorrowRequest) -> Option<Lease> {
        let position = *self.by_key.get(request.key.as_ref()?)?;
        let held = self.slots[position as usize].as_ref()?;
        Some(held.lease(request.pool, position))
    }

    /// The lowest free position below `count` (R6), if fewer than `count`
    /// leases are active (R10): the first gap below the high mark, or the
    /// high mark itself.
    fn lowest_free(&self) -> Option<u32> {
        if self.by_id.len() as u64 >= u64::from(self.count) {
            return None;
        }
        let position = self.free.first().unwrap_or(self.slots.len() as u32);
        (position < self.count).then_some(position)
    }

    fn reap(&mut self, now: SystemTime) {
        while let Some(&(at, position)) = self.expiries.first() {
            if at > now {
                break;
            }
            self.expiries.pop_first();
            self.vacate(position);
        }
    }

    /// Empties `position`: forgets its lease, id, key and expiry, and frees
    /// it. Lowers the high mark past every free position at the top, so
    /// that memory shrinks back with the leases held.
    fn vacate(&mut self, position: u32) {
        let Some(held) = self.slots.get_mut(position as usize).and_then(Option::take) else {
            return;
        };
        self.expiries.remove(&(held.expires_at, position));
        self.by_id.remove(&held.id);
        if let Some(key) = &held.key {
            self.by_key.remove(key);
        }
        self.free.insert(position);
        while let Some(None) = self.slots.last() {
            self.slots.pop();
            self.free.remove(self.slots.len() as u32);
        }
        self.free.truncate(self.slots.len() as u32);
    }
}

mod free;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PoolId;
    use std::time::{Duration, UNIX_EPOCH};

    fn req(ttl_s: u64) -> BorrowRequest {
        BorrowRequest::new(
            PoolId::from_name("t"),
            LeaseId::new(),
            Duration::from_secs(ttl_s),
        )
    }

    fn position(t: TryBorrow) -> u32 {
        match t {
            TryBorrow::Granted { lease, .. } => lease.position,
            other => panic!("expected a grant, got {other:?}"),
        }
    }

    #[test]
    fn grants_lowest_free_and_reuses_returned() {
        let mut t = SlotTable::new(3);
        let mut tok = 0;
        let mut next = || {
            tok += 1;
            tok
        };
        let a = req(10);
        assert_eq!(position(t.grant(&a, UNIX_EPOCH, &mut next)), 0);
        assert_eq!(position(t.grant(&req(10), UNIX_EPOCH, &mut next)), 1);
        assert!(t.release(a.lease, UNIX_EPOCH));
        assert_eq!(position(t.grant(&req(10), UNIX_EPOCH, &mut next)), 0);
        assert_eq!(position(t.grant(&req(10), UNIX_EPOCH, &mut next)), 2);
        assert!(matches!(
            t.grant(&req(10), UNIX_EPOCH, &mut next),
            TryBorrow::Exhausted { .. }
        ));
    }

    #[test]
    fn expired_slot_is_reaped_and_handed_out_next() {
        let mut t = SlotTable::new(2);
        let short = req(1);
        assert_eq!(position(t.grant(&short, UNIX_EPOCH, || 1)), 0);
        assert_eq!(position(t.grant(&req(10), UNIX_EPOCH, || 2)), 1);
        assert_eq!(t.in_use(UNIX_EPOCH + Duration::from_secs(1)), 1);
        assert!(!t.release(short.lease, UNIX_EPOCH + Duration::from_secs(1)));
        assert_eq!(
            position(t.grant(&req(10), UNIX_EPOCH + Duration::from_secs(1), || 3)),
            0
        );
    }

    #[test]
    fn lowered_count_withholds_high_positions() {
        let mut t = SlotTable::new(4);
        let held: Vec<_> = (0..4)
            .map(|i| {
                let r = req(10);
                assert_eq!(position(t.grant(&r, UNIX_EPOCH, || i)), i as u32);
                r
            })
            .collect();
        t.set_count(2);
        t.release(held[3].lease, UNIX_EPOCH);
        t.release(held[0].lease, UNIX_EPOCH);
        // in_use 2 (positions 1, 2) == count 2: nothing is granted.
        assert!(matches!(
            t.grant(&req(10), UNIX_EPOCH, || 9),
            TryBorrow::Exhausted { .. }
        ));
        t.release(held[2].lease, UNIX_EPOCH);
        assert_eq!(position(t.grant(&req(10), UNIX_EPOCH, || 9)), 0);
        t.set_count(4);
        assert_eq!(position(t.grant(&req(10), UNIX_EPOCH, || 10)), 2);
        assert_eq!(position(t.grant(&req(10), UNIX_EPOCH, || 11)), 3);
    }

    #[test]
    fn agrees_with_reference_across_bitset_words_and_count_changes() {
        let mut count = 200;
        let mut t = SlotTable::new(count);
        let mut held: Vec<(LeaseId, u32)> = Vec::new();
        let mut x: u64 = 0x853c_49e6_748f_ea9b;
        for step in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match x % 5 {
                0 if !held.is_empty() => {
                    let (id, _) = held.swap_remove((x as usize / 5) % held.len());
                    assert!(t.release(id, UNIX_EPOCH));
                }
                1 if step % 97 == 0 => {
                    // Across word boundaries: 63, 64, 65, 127, 128, ...
                    count = [0, 1, 63, 64, 65, 127, 128, 129, 200][(x as usize / 5) % 9];
                    t.set_count(count);
                }
                _ => {
                    let expected = ((held.len() as u32) < count)
                        .then(|| lowest_free(count, held.iter().map(|h| h.1)))
                        .flatten();
                    let r = req(10);
                    match (t.grant(&r, UNIX_EPOCH, || step), expected) {
                        (TryBorrow::Granted { lease, .. }, Some(p)) => {
                            assert_eq!(lease.position, p, "step {step}, count {count}");
                            held.push((r.lease, p));
                        }
                        (TryBorrow::Exhausted { .. }, None) => {}
                        (got, want) => panic!("step {step}: got {got:?}, reference {want:?}"),
                    }
                }
            }
        }
    }

    /// Issue 11, item 6: registering a huge count allocates nothing per
    /// slot; what is allocated follows the most leases held at once.
    #[test]
    fn memory_follows_leases_held_not_count() {
        let mut t = SlotTable::new(u32::MAX);
        assert_eq!((t.slots.capacity(), t.free.words()), (0, 0));
        let leases: Vec<_> = (0..200)
            .map(|i| {
                let r = req(10);
                assert_eq!(position(t.grant(&r, UNIX_EPOCH, || i)), i as u32);
                r.lease
            })
            .collect();
        assert_eq!(t.slots.len(), 200);
        assert!(t.slots.capacity() <= 256 && t.free.words() <= 4);
        assert!(t.release(leases[3], UNIX_EPOCH));
        assert_eq!(
            position(t.grant(&req(10), UNIX_EPOCH, || 300)),
            3,
            "a gap is reused first"
        );
        for id in &leases[4..] {
            assert!(t.release(*id, UNIX_EPOCH));
        }
        assert_eq!(t.slots.len(), 4, "the high mark came down with the leases");
        assert!(t.free.len() <= 1);
        t.set_count(2);
        assert_eq!(t.in_use(UNIX_EPOCH), 4);
        assert!(matches!(
            t.grant(&req(10), UNIX_EPOCH, || 9),
            TryBorrow::Exhausted { .. }
        ));
    }

    #[test]
    fn agrees_with_reference_on_a_long_mixed_run() {
        // A deterministic pseudo-random walk, checked against lowest_free.
        let mut t = SlotTable::new(8);
        let mut held: Vec<(LeaseId, u32)> = Vec::new();
        let mut x: u64 = 0x9e3779b97f4a7c15;
        for step in 0..5_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if x.is_multiple_of(3) && !held.is_empty() {
                let (id, _) = held.swap_remove((x as usize / 3) % held.len());
                assert!(t.release(id, UNIX_EPOCH));
            } else {
                let expected = lowest_free(8, held.iter().map(|h| h.1));
                let r = req(10);
                match (t.grant(&r, UNIX_EPOCH, || step), expected) {
                    (TryBorrow::Granted { lease, .. }, Some(p)) => {
                        assert_eq!(lease.position, p);
                        held.push((r.lease, p));
                    }
                    (TryBorrow::Exhausted { .. }, None) => {}
                    (got, want) => panic!("step {step}: got {got:?}, reference {want:?}"),
                }
            }
        }
    }
}
