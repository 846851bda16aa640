//! The wait engine's one timer: every queued borrower's deadline, and the
//! instant its head is to ask again (the earliest expiry it was told of),
//! served by one sleep per engine instead of one per borrower.
//!
//! tokio's `Semaphore` leaves deadlines to its callers, who pay for a timer
//! entry each (`tokio::time::timeout`: about 1,700 instructions a borrow on
//! BENCHMARKS.md line 2p). A waiting borrow here needs up to two (its
//! deadline, and as the head the next expiry); registering them was about
//! 1,000 instructions and an allocation a borrow. Instead one queued
//! borrower, the *keeper*, sleeps until the earliest instant any of them
//! needs (`armed`), on the store's clock, in its own task, and then rings:
//! under the queues' lock it marks each waiter whose deadline passed timed
//! out and wakes it, wakes each head whose instant came, and sleeps again
//! until the next. A borrower that joins with an earlier instant than
//! `armed` takes the alarm over (the old keeper's sleep, now late, rings
//! for nothing and ends); one that joins later costs a comparison. A keeper
//! that leaves hands the alarm to the waiter that joined last, the one
//! likely to wait longest, and wakes it to start its sleep. So the sleep is
//! started about once per queue's turnover, not once per borrow; an
//! instant that no longer matters (its borrower left) rings early, and the
//! alarm then sleeps until the next.
//!
//! The keeper's task rings for everyone: a keeper whose future is not
//! polled when woken delays the others' deadlines by as much, as a head not
//! polled holds back its queue. The keeper's sleep runs on its own task's
//! runtime, so that a runtime shut down takes its keeper with it (its
//! ticket, dropped, hands the alarm on).

use std::time::SystemTime;

use crate::sync::Ordering;

use super::Changes;
use super::queue::Waiter;

impl Changes {
    /// The alarm rang at `now` in the task of the waiter with sequence
    /// number `seq`: marks every waiter whose deadline passed timed out and
    /// wakes it, wakes each head whose instant came, and returns when that
    /// task is to ring next: `None` if it no longer keeps the alarm (another
    /// waiter took it over), or nobody needs it.
    pub(crate) fn ring(&self, now: SystemTime, seq: u64) -> Option<SystemTime> {
        let now_ms = crate::clock::UnixMs::from(now).get();
        let mut queues = self.queues.lock();
        let mut next: Option<SystemTime> = None;
        for queue in queues.map.values() {
            for waiter in &queue.waiters {
                if let Some(at) = waiter.ring(now, now_ms) {
                    next = Some(next.map_or(at, |next| next.min(at)));
                }
            }
        }
        if self.keeper.load(Ordering::Acquire) != seq {
            return None;
        }
        queues.armed = next;
        if next.is_none() {
            self.keeper.store(0, Ordering::Release);
        }
        next
    }

    /// `waiter` needs a wake-up at `at` (its deadline, or as the head the
    /// instant to ask again), under the queues' lock, held as `queues`: if
    /// the alarm rings later than that or not at all, `waiter` takes it over
    /// and returns when its sleep is to end; otherwise `None`.
    pub(super) fn arm(
        &self,
        queues: &mut super::Queues,
        waiter: &Waiter,
        at: SystemTime,
    ) -> Option<SystemTime> {
        if queues.armed.is_some_and(|armed| armed <= at) {
            return None;
        }
        queues.armed = Some(at);
        self.keeper.store(waiter.seq, Ordering::Release);
        Some(at)
    }

    /// The waiter with sequence number `seq` leaves its queues (it is out
    /// of them, or leaving under the same lock): if it kept the alarm, the
    /// waiter that joined last takes it over and is woken to start its
    /// sleep; with nobody left, the alarm is off. One atomic load for a
    /// waiter that did not keep it.
    pub(super) fn left(&self, queues: &mut super::Queues, seq: u64) {
        if self.keeper.load(Ordering::Acquire) != seq || crate::sync::planted("alarm_no_handover") {
            return;
        }
        let last = queues
            .map
            .values()
            .filter_map(|queue| queue.waiters.iter().rev().find(|waiter| waiter.seq != seq))
            .max_by_key(|waiter| waiter.seq)
            .cloned();
        match (last, queues.armed) {
            (Some(next), Some(armed)) => {
                self.keeper.store(next.seq, Ordering::Release);
                next.state.lock().keep = Some(armed);
                next.notify.notify_one();
            }
            _ => {
                queues.armed = None;
                self.keeper.store(0, Ordering::Release);
            }
        }
    }
}
