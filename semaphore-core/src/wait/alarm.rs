//! The wait engine's one timer: every queued borrower's deadline, and the
//! instant its head is to ask again (the earliest expiry it was told of),
//! served by one sleep per engine instead of one per borrower.
//!
//! tokio's `Semaphore` leaves deadlines to its callers, who pay for a timer
//! entry each (`tokio::time::timeout`: about 1,700 instructions a borrow on
//! BENCHMARKS.md line 2p). A waiting borrow here needs up to two (its
//! deadline, and as the head the next expiry); registering them was about
//! 1,000 instructions and an allocation a borrow. Instead one task, spawned
//! on the runtime of the borrower that found the alarm off, sleeps on the
//! store's clock until the earliest instant any waiter needs
//! (`armed`), and then rings: under the queues' lock it marks each waiter
//! whose deadline passed timed out and wakes it, wakes each head whose
//! instant came, and sleeps again until the next; with no instant left, it
//! ends, and the next borrower to queue starts another. A borrower that
//! queues with an earlier instant than `armed` tells the task to sleep
//! less; one that queues later costs a comparison. An instant that no
//! longer matters (its borrower left) rings early, for nothing.
//!
//! A task of its own, the alarm does not depend on any borrower's future: a
//! future not polled, or a head in a slow store call, delays no one else's
//! deadline. Its runtime, shut down, drops it: the alarm is then off and
//! every waiter is woken, and each arms it again as it looks (a waiter arms
//! it at each wake-up), starting a task on its own runtime. Waiters that
//! share a store from several runtimes depend on the one that runs the
//! task: blocked or idle, it delays their deadlines (a waiter's own
//! runtime, blocked, delays its own anyway).

use std::sync::{Arc, Weak};
use std::time::SystemTime;

use super::Changes;
use super::queue::Waiter;
use crate::primitives::Store;

/// What [`Changes::arm`] asks of the borrower that armed the alarm.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Arm {
    /// The alarm rings by then already.
    Set,
    /// The task sleeps past it: tell it to look again.
    Sooner,
    /// No task runs: start one.
    Start,
}

impl Changes {
    /// The alarm rang at `now`: marks every waiter whose deadline passed
    /// timed out and wakes it, wakes each head whose instant came, and
    /// returns when to ring next; `None` if nobody needs it, and the alarm
    /// is then off (the next to arm it starts its task again).
    pub(crate) fn ring(&self, now: SystemTime) -> Option<SystemTime> {
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
        queues.armed = next;
        next
    }

    /// The alarm is to ring by `at` (a waiter's deadline, or as the head
    /// the instant to ask again): what the caller must do for that
    /// ([`Arm`]). `store` is the store the task that a start asks for would
    /// serve: a task whose store is gone (a handle's wrapper of the store
    /// that owns these queues, dropped) rings no more, and the alarm is
    /// then off.
    pub(crate) fn arm(&self, at: SystemTime, store: Option<&Arc<dyn Store>>) -> Arm {
        let mut queues = self.queues.lock();
        let running = queues
            .task
            .as_ref()
            .is_none_or(|task| task.strong_count() > 0);
        match queues.armed {
            Some(armed) if running && armed <= at => Arm::Set,
            Some(_) if running => {
                queues.armed = Some(at);
                Arm::Sooner
            }
            _ if crate::sync::planted("alarm_never_starts") => Arm::Set,
            _ => {
                queues.armed = Some(at);
                queues.task = store.map(Arc::downgrade);
                Arm::Start
            }
        }
    }

    /// [`arm`](Changes::arm) for a borrower of `store`, in a runtime, and
    /// what it asks: the alarm's task told to look again, or started on the
    /// current runtime.
    pub(crate) fn arm_for(&self, store: &Arc<dyn Store>, at: SystemTime) {
        match self.arm(at, Some(store)) {
            Arm::Set => {}
            Arm::Sooner => self.sooner.notify_one(),
            Arm::Start => {
                let running = Running {
                    store: Arc::downgrade(store),
                    ended: false,
                };
                drop(tokio::spawn(alarm(running, self.sooner.clone())));
            }
        }
    }

    /// The alarm's task was dropped before it ended (its runtime shut
    /// down): the alarm is off, and every waiter is woken to arm it again.
    fn alarm_lost(&self) {
        let mut queues = self.queues.lock();
        queues.armed = None;
        for queue in queues.map.values() {
            for waiter in &queue.waiters {
                waiter.notify.notify_one();
            }
        }
    }
}

impl Waiter {
    /// The alarm rang at `now` (`now_ms` in unix ms): marks it timed out
    /// if its deadline passed, wakes it if that or its
    /// [`wake_at`](Waiter::wake_at) came, and returns the next instant it
    /// must be woken at, if any. Takes no lock unless something is due.
    pub(super) fn ring(&self, now: SystemTime, now_ms: u64) -> Option<SystemTime> {
        use crate::sync::Ordering;
        let at = self.wake_at.load(Ordering::Acquire);
        let came = at != 0 && at <= now_ms;
        let due = self.deadline <= now;
        let mut next = (!due).then_some(self.deadline);
        if at != 0 && !came {
            let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(at);
            next = Some(next.map_or(at, |next| next.min(at)));
        }
        if !came && !due {
            return next;
        }
        let mut wake = came;
        if came {
            self.wake_at.store(0, Ordering::Release);
        }
        if due {
            let mut state = self.state.lock();
            wake |= !state.timed_out;
            state.timed_out = true;
        }
        if wake && !crate::sync::planted("alarm_rings_no_one") {
            self.notify.notify_one();
        }
        next
    }
}

/// The alarm's task for the waiters of `store`: sleeps on its clock until
/// the instant armed, or until told of a sooner one (`sooner`), rings, and
/// ends once nobody needs it, or the store is gone. It keeps no strong
/// handle on the store while it sleeps.
async fn alarm(mut running: Running, sooner: Arc<tokio::sync::Notify>) {
    ring_until_off(&running.store, &sooner).await;
    running.ended = true;
}

/// The alarm task's loop: returns once the alarm is off or the store gone.
async fn ring_until_off(store: &Weak<dyn Store>, sooner: &tokio::sync::Notify) {
    loop {
        let sleep = {
            let Some(store) = store.upgrade() else {
                return;
            };
            let Some(at) = store.changes().queues.lock().armed else {
                return;
            };
            store.clock().sleep_until(at)
        };
        tokio::select! {
            () = sleep => {}
            () = sooner.notified() => continue,
        }
        let Some(store) = store.upgrade() else {
            return;
        };
        let now = store.clock().now();
        if store.changes().ring(now).is_none() {
            return;
        }
    }
}

/// The alarm's task, for the store it serves: dropped before the task
/// ends, it turns the alarm off ([`Changes::alarm_lost`]).
struct Running {
    store: Weak<dyn Store>,
    /// The task ended: the alarm was off, or the store gone.
    ended: bool,
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        if let Some(store) = self.store.upgrade() {
            store.changes().alarm_lost();
        }
    }
}
