//! Held places in a [`SlotTable`]: the places of two-phase borrows that no
//! task owns ([`BorrowRequest::hold`]), for an in-process store to keep
//! as a shared store keeps them in its queue (*Held places* in the
//! `Store` trait's contract).
//!
//! A place is owed its weight before every borrower of this process that
//! came after it, and after every one that came before it: arrivals are
//! numbers from the same counter as this process's queued borrowers
//! ([`Changes::arrival`](crate::store::Changes::arrival)). A place is
//! granted only to a poll, never handed a slot by a return, and lapses
//! `hold` after its latest poll. A place for more slots than the
//! pool's count keeps its place but is owed nothing until the count
//! reaches its weight.

use std::collections::VecDeque;
use std::time::SystemTime;

use super::{Keyed, SlotTable};
use crate::clock::UnixMs;
use crate::{id::WaiterId, request::BorrowRequest, request::TryBorrow};

/// One held place.
#[derive(Debug, Clone)]
struct Place {
    waiter: WaiterId,
    /// Its weight: what its latest poll asked for.
    slots: u32,
    arrival: u64,
    /// When it took its place.
    since: UnixMs,
    /// When it lapses, unless polled again before.
    until: UnixMs,
}

/// A table's held places, in order of arrival.
#[derive(Debug, Clone, Default)]
pub(super) struct Places(VecDeque<Place>);

impl Places {
    /// Drops the places whose hold has passed at `now`.
    fn lapse(&mut self, now: UnixMs) {
        if !self.0.is_empty() {
            self.0.retain(|place| place.until > now);
        }
    }

    /// The slots owed to the places that came before `arrival`, on a pool
    /// of `count` slots: a place for more than `count` keeps its place but
    /// is owed nothing while the count is below its weight.
    fn owed_before(&self, arrival: u64, count: u32) -> u32 {
        self.0
            .iter()
            .take_while(|place| place.arrival < arrival)
            .filter(|place| place.slots <= count)
            .fold(0, |owed, place| owed.saturating_add(place.slots))
    }

    fn index(&self, waiter: WaiterId) -> Option<usize> {
        self.0.iter().position(|place| place.waiter == waiter)
    }

    fn earliest_lapse(&self) -> Option<UnixMs> {
        self.0.iter().map(|place| place.until).min()
    }
}

impl SlotTable {
    /// Grants `request` as [`grant`](SlotTable::grant) does, to a borrower
    /// of this process that came at `arrival` (its queued borrower's
    /// [`Changes::arrival_of`](crate::store::Changes::arrival_of), or
    /// `u64::MAX` for one not queued): only from the slots left after
    /// those owed to the held places that came before it, each owed its
    /// weight, but none for more slots than the count.
    /// A refusal tells the earliest moment the answer
    /// can change by itself ([`next_change`](SlotTable::next_change)).
    #[inline]
    pub fn grant_in_turn(
        &mut self,
        request: &BorrowRequest,
        now: impl Into<UnixMs>,
        arrival: u64,
        next_token: impl FnOnce() -> u64,
    ) -> TryBorrow {
        let now = now.into();
        // The common path: no held place, nothing owed.
        if !self.places.0.is_empty() {
            self.places.lapse(now);
            let owed = self.places.owed_before(arrival, self.count());
            if owed > 0 && !self.fits_after(request, now, owed) {
                return self.refusal();
            }
        }
        self.grant(request, now, next_token)
    }

    /// Whether [`grant_in_turn`](SlotTable::grant_in_turn) would grant
    /// `request` at `now`, for a borrower that came at `arrival`.
    pub fn can_grant_in_turn(
        &mut self,
        request: &BorrowRequest,
        now: impl Into<UnixMs>,
        arrival: u64,
    ) -> bool {
        let now = now.into();
        self.places.lapse(now);
        let owed = self.places.owed_before(arrival, self.count());
        self.can_grant(request, now) && (owed == 0 || self.fits_after(request, now, owed))
    }

    /// One poll of the held place of `request.waiter`, kept for
    /// `request.hold` after it if refused (a request without both is
    /// [`grant_in_turn`](SlotTable::grant_in_turn) as a newcomer). The
    /// first poll takes the place at the tail, at the arrival `arrival`
    /// hands out. Granted from the slots left after those owed to the
    /// places before it and to this process's borrowers that came before
    /// it, `in_process(arrival)` slots ([`Changes::ahead_of`](crate::store::Changes::ahead_of));
    /// a grant ends the place. A request whose key names an active lease
    /// gets that lease, whatever its turn (a repeated poll).
    pub fn poll_place(
        &mut self,
        request: &BorrowRequest,
        now: impl Into<UnixMs>,
        in_process: impl FnOnce(u64) -> u32,
        arrival: impl FnOnce() -> u64,
        next_token: impl FnOnce() -> u64,
    ) -> TryBorrow {
        let now = now.into();
        let (Some(waiter), Some(hold)) = (request.waiter, request.hold) else {
            return self.grant_in_turn(request, now, u64::MAX, next_token);
        };
        self.places.lapse(now);
        let index = self.places.index(waiter).unwrap_or_else(|| {
            self.places.0.push_back(Place {
                waiter,
                slots: request.slots,
                arrival: arrival(),
                since: now,
                until: now,
            });
            self.places.0.len() - 1
        });
        let place = &mut self.places.0[index];
        place.slots = request.slots;
        let arrival = place.arrival;
        let owed = self
            .places
            .owed_before(arrival, self.count())
            .saturating_add(in_process(arrival));
        if owed == 0 || self.fits_after(request, now, owed) {
            let answer = self.grant(request, now, next_token);
            if matches!(answer, TryBorrow::Granted { .. }) {
                self.places.0.remove(index);
                return answer;
            }
        }
        self.places.0[index].until = now.saturating_add(hold);
        self.refusal()
    }

    /// The held place of `waiter` at `now`: its index among the table's
    /// places (0 for the first) and its arrival; `None` if it has none
    /// (granted, left, lapsed, or never taken).
    pub fn held_place(&mut self, waiter: WaiterId, now: impl Into<UnixMs>) -> Option<(usize, u64)> {
        self.places.lapse(now.into());
        let index = self.places.index(waiter)?;
        Some((index, self.places.0[index].arrival))
    }

    /// Drops the held place of `waiter`; whether it had one.
    pub fn leave_place(&mut self, waiter: WaiterId) -> bool {
        let Some(index) = self.places.index(waiter) else {
            return false;
        };
        self.places.0.remove(index);
        true
    }

    /// The held places kept at `now`, in order of arrival
    /// ([`Store::queue`](crate::store::Store::queue)).
    pub fn queue(&mut self, now: impl Into<UnixMs>) -> Vec<crate::QueuedPlace> {
        self.places.lapse(now.into());
        self.places
            .0
            .iter()
            .map(|place| {
                crate::QueuedPlace::kept(place.waiter, place.slots, place.since.into(), true)
            })
            .collect()
    }

    /// How many held places are kept at `now`
    /// ([`PoolState::queued`](crate::PoolState::queued)).
    pub fn queued(&mut self, now: impl Into<UnixMs>) -> u32 {
        self.places.lapse(now.into());
        u32::try_from(self.places.0.len()).unwrap_or(u32::MAX)
    }

    /// Whether any held place is kept at `now`: a store then wakes the
    /// queue's head to ask ([`Changes::notify`](crate::store::Changes::notify))
    /// rather than handing it a returned slot, which a place may be owed.
    pub fn has_places(&mut self, now: impl Into<UnixMs>) -> bool {
        self.places.lapse(now.into());
        !self.places.0.is_empty()
    }

    /// The earliest moment the table's answers can change by themselves: a
    /// lease's expiry or a held place's lapse, if any.
    pub fn next_change(&self) -> Option<SystemTime> {
        let change = match (self.earliest_expiry(), self.places.earliest_lapse()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        change.map(UnixMs::to_system_time)
    }

    /// Whether `request` fits in the slots left after `owed`, or its key
    /// names an active lease (which takes no slot).
    fn fits_after(&mut self, request: &BorrowRequest, now: UnixMs, owed: u32) -> bool {
        self.reap(now);
        matches!(self.keyed(request), Keyed::Same(_))
            || self.has_room(request.slots.max(1).saturating_add(owed))
    }

    fn refusal(&self) -> TryBorrow {
        TryBorrow::Exhausted {
            next_expiry: self.next_change(),
        }
    }
}
