//! [`ServerClock`]: a process's view of a database server's clock, and
//! [`DecidingClock`]: which clock decides, for the stores whose server
//! decides expiry (rule "Time").
//!
//! The view is conservative: it reads the latest the server's clock
//! can show now, never less. A reading `S` of the server's clock, taken in
//! a step this process sent at local instant `t0`, was made at or after
//! `t0`; so at any later local instant `t` the server's clock shows at most
//! `S + 1 ms + (t - t0) * (1 + ε)`, where the 1 ms covers the server's
//! truncation to whole milliseconds and `ε` = [`RATE_MARGIN_PPM`] covers
//! the two clocks running at different rates. The view keeps the lowest
//! such bound of all its readings. A holder that compares a lease's expiry
//! with this view therefore stops believing it holds the lease no later
//! than the server lets anyone else take it, however long a round trip
//! took or a reply was lost.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;

use crate::clock::{from_unix_ms, unix_ms};
use crate::{clock::Clock, clock::ManualClock, clock::MonotonicClock, clock::Sleep};

/// The margin for clock rate the view allows, in parts per million: the
/// server's clock may run this much faster than this process's, as
/// measured on this process's clock. 1000 ppm (0.1 %) covers a quartz
/// clock's error (tens of ppm) and NTP's largest slew (500 ppm) on both
/// machines.
pub const RATE_MARGIN_PPM: i64 = 1000;

/// This process's view of a database server's clock, which decides expiry
/// for every machine (rule "Time"): a local clock plus what its readings of
/// the server's clock bound.
///
/// [`now`](Clock::now) is an upper bound of the server's clock (see the
/// module docs), so a lease whose expiry is after it is certainly still
/// active on the server, and a wait timed by it wakes no later than
/// the server reaches the deadline. [`offset`](ServerClock::offset) is the
/// midpoint estimate, for people.
pub struct ServerClock {
    local: Arc<dyn Clock>,
    /// Server minus local, in ms, at the midpoint of the last reading.
    offset_ms: AtomicI64,
    /// The reading that bounds the server's clock lowest; `None` before
    /// the first. Shared with the sleeps on the view, which read it again.
    bound: Arc<Mutex<Option<Bound>>>,
}

/// One reading of the server's clock: `server_ms` read in a step sent at
/// local `sent_ms` (plus the 1 ms of truncation).
#[derive(Debug, Clone, Copy)]
struct Bound {
    sent_ms: i64,
    server_ms: i64,
}

impl Bound {
    /// The latest the server's clock can read at local `t_ms`.
    fn at(self, t_ms: i64) -> i64 {
        let elapsed = i128::from((t_ms - self.sent_ms).max(0));
        let bound = i128::from(self.server_ms)
            + 1
            + elapsed
            + div_ceil(elapsed * i128::from(RATE_MARGIN_PPM), 1_000_000);
        i64::try_from(bound).unwrap_or(i64::MAX)
    }

    /// The earliest local instant at which [`at`](Bound::at) reaches
    /// `server_ms` (saturating, for deadlines as far as [`MAX_UNIX_MS`](crate::store::MAX_UNIX_MS)).
    fn local_when(self, server_ms: i64) -> i64 {
        let need = i128::from(server_ms) - i128::from(self.server_ms) - 1;
        if need <= 0 {
            return self.sent_ms;
        }
        let ppm = i128::from(RATE_MARGIN_PPM);
        // elapsed * (1 + ppm/1e6) >= need, smallest such elapsed.
        let mut elapsed = need * 1_000_000 / (1_000_000 + ppm);
        while elapsed + div_ceil(elapsed * ppm, 1_000_000) < need {
            elapsed += 1;
        }
        i64::try_from(i128::from(self.sent_ms) + elapsed).unwrap_or(i64::MAX)
    }
}

fn div_ceil(a: i128, b: i128) -> i128 {
    (a + b - 1).div_euclid(b)
}

impl fmt::Debug for ServerClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerClock")
            .field("local", &self.local)
            .field("offset_ms", &self.offset_ms.load(Ordering::Relaxed))
            .finish()
    }
}

impl ServerClock {
    /// A view of `local`, which reads `local` itself (no offset, no bound)
    /// until the first [`observe`](Self::observe). Stores observe at
    /// connect.
    pub fn new(local: Arc<dyn Clock>) -> Self {
        Self {
            local,
            offset_ms: AtomicI64::new(0),
            bound: Arc::new(Mutex::new(None)),
        }
    }

    /// The server's clock minus this process's, as last measured (the
    /// midpoint estimate): its size, and whether the server is ahead.
    pub fn offset(&self) -> (Duration, bool) {
        let ms = self.offset_ms.load(Ordering::Relaxed);
        (Duration::from_millis(ms.unsigned_abs()), ms >= 0)
    }

    /// Records a reading of the server's clock, `server_ms` (unix ms), taken
    /// in a step sent at this process's `before` and answered by `after`
    /// (both readings of [`local`](Self::local)). The reading bounds the
    /// view from `before` on; the midpoint estimate takes it as read at the
    /// midpoint.
    pub fn observe(&self, before: SystemTime, server_ms: i64, after: SystemTime) {
        let (before, after) = (unix_ms(before) as i64, unix_ms(after) as i64);
        let midpoint = before + (after - before) / 2;
        self.offset_ms
            .store(server_ms - midpoint, Ordering::Relaxed);
        let new = Bound {
            sent_ms: before,
            server_ms,
        };
        let mut bound = self.bound.lock();
        // Equal rates: the lower of two bounds now stays the lower. A
        // reading above the old bound at `after` proves it wrong (the
        // server's clock stepped forward, or another server with a clock
        // ahead answers after a failover): it no longer bounds anything,
        // and the new one replaces it at once, or a holder would see its
        // lease live for as long as the step lasts (4 s for a
        // 4 s step, as a hostile test found).
        if bound.is_none_or(|old| new.at(after) <= old.at(after) || server_ms > old.at(after)) {
            *bound = Some(new);
        }
    }

    /// The local clock, whose readings [`observe`](Self::observe) takes.
    pub fn local(&self) -> &dyn Clock {
        &*self.local
    }
}

/// The latest the server's clock can read at local time `local`, by
/// `bound` (module docs); `local` itself before the first reading.
fn view_at(bound: Option<Bound>, local: SystemTime) -> SystemTime {
    match bound {
        Some(bound) => from_unix_ms(bound.at(unix_ms(local) as i64).max(0) as u64),
        None => local,
    }
}

impl Clock for ServerClock {
    /// The latest the server's clock can read now (module docs).
    fn now(&self) -> SystemTime {
        view_at(*self.bound.lock(), self.local.now())
    }

    /// Completes once [`now`](Clock::now) reaches `deadline`: no later
    /// than the server's clock does. The local time that reaching takes is
    /// worked out again from the newest reading at least every
    /// second of local time, so a reading that
    /// moves the view (the server's clock stepped forward, a failover to a
    /// server ahead) ends the sleep within a second.
    fn sleep_until(&self, deadline: SystemTime) -> Sleep {
        let (local, bound) = (self.local.clone(), self.bound.clone());
        Box::pin(async move {
            loop {
                let current = *bound.lock();
                let now = local.now();
                if view_at(current, now) >= deadline {
                    return;
                }
                let when = match current {
                    Some(bound) => {
                        from_unix_ms(bound.local_when(unix_ms(deadline) as i64).max(0) as u64)
                    }
                    None => deadline,
                };
                let recheck = crate::clock::saturating_add(now, crate::clock::RECHECK);
                local.sleep_until(when.min(recheck)).await;
            }
        })
    }
}

/// Which clock decides expiry for a store whose server decides, and which
/// one times the core's waits (rule "Time").
#[derive(Debug, Clone)]
pub enum DecidingClock {
    /// The server's clock decides, read inside each atomic step; the view
    /// times the waits.
    Server(Arc<ServerClock>),
    /// Test mode: a manual clock decides (its reading is passed into every
    /// step in place of the server's) and times everything, so that tests
    /// move time without sleeping. Every store sharing the data must share
    /// the clock.
    Manual(Arc<ManualClock>),
}

impl Default for DecidingClock {
    /// The server's clock, viewed through this process's
    /// [`MonotonicClock`].
    fn default() -> Self {
        DecidingClock::Server(Arc::new(ServerClock::new(Arc::new(MonotonicClock::new()))))
    }
}

impl DecidingClock {
    /// The clock that times the core's waits.
    pub fn clock(&self) -> &dyn Clock {
        match self {
            DecidingClock::Server(view) => &**view,
            DecidingClock::Manual(clock) => &**clock,
        }
    }

    /// The explicit now, unix ms, to pass into a step: `None` (the server
    /// reads its own clock) except in test mode.
    pub fn now_param(&self) -> Option<u64> {
        match self {
            DecidingClock::Server(_) => None,
            DecidingClock::Manual(clock) => Some(unix_ms(clock.now())),
        }
    }

    /// The view of the server's clock; `None` in test mode.
    pub fn server(&self) -> Option<&Arc<ServerClock>> {
        match self {
            DecidingClock::Server(view) => Some(view),
            DecidingClock::Manual(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_view_bounds_the_server_from_above_and_keeps_the_tightest_reading() {
        let local = Arc::new(ManualClock::new());
        let view = ServerClock::new(local.clone());
        let t = local.now();
        // The server read 30 s ahead, in a step sent at t and answered at
        // t + 10 ms.
        let server = unix_ms(t + Duration::from_secs(30)) as i64;
        view.observe(t, server, t + Duration::from_millis(10));
        assert_eq!(view.offset(), (Duration::from_millis(29_995), true));
        local.advance(Duration::from_millis(10));
        // At most 10 ms of the server's time passed, plus the rate margin
        // (10 µs, rounded up to 1 ms) and 1 ms of truncation.
        assert_eq!(
            view.now(),
            t + Duration::from_secs(30) + Duration::from_millis(12)
        );
        // A reading after a slow round trip bounds less tightly: ignored.
        let later = local.now();
        view.observe(later, server + 500, later + Duration::from_millis(900));
        local.advance(Duration::from_millis(900));
        assert_eq!(
            view.now(),
            t + Duration::from_secs(30) + Duration::from_millis(912)
        );
        // One that bounds tighter replaces it.
        let again = local.now();
        view.observe(again, server + 905, again + Duration::from_millis(1));
        assert_eq!(
            view.now(),
            t + Duration::from_secs(30) + Duration::from_millis(906)
        );
    }

    #[test]
    fn a_reading_above_the_bound_replaces_it_at_once() {
        let local = Arc::new(ManualClock::new());
        let view = ServerClock::new(local.clone());
        let t = local.now();
        let server = unix_ms(t) as i64;
        view.observe(t, server, t + Duration::from_millis(1));
        local.advance(Duration::from_secs(10));
        // The server's clock stepped 4 s forward meanwhile: its reading is
        // above what the old bound allowed.
        let now = local.now();
        let stepped = server + 14_000;
        view.observe(now, stepped, now + Duration::from_millis(1));
        local.advance(Duration::from_millis(1));
        assert!(
            unix_ms(view.now()) as i64 >= stepped,
            "the view stayed behind the stepped clock: {:?}",
            view.now()
        );
    }

    /// A reading that moves the view past a deadline (the server's
    /// clock stepped 10 s forward) ends a sleep on the view within a
    /// second of local time, not at the local deadline worked out before.
    #[test]
    fn a_sleep_on_the_view_sees_a_new_reading_within_a_second() {
        use std::task::{Context, Poll, Waker};
        let local = Arc::new(ManualClock::new());
        let view = ServerClock::new(local.clone());
        let t = local.now();
        view.observe(t, unix_ms(t) as i64, t);
        let deadline = view.now() + Duration::from_secs(6);
        let mut sleep = view.sleep_until(deadline);
        let mut cx = Context::from_waker(Waker::noop());
        assert!(sleep.as_mut().poll(&mut cx).is_pending());
        view.observe(t, unix_ms(t) as i64 + 10_000, t);
        assert!(view.now() >= deadline);
        local.advance(crate::clock::RECHECK);
        assert_eq!(sleep.as_mut().poll(&mut cx), Poll::Ready(()));
    }

    #[test]
    fn a_sleep_until_a_deadline_ends_no_later_than_the_bound_reaches_it() {
        let sent = 1_000_000;
        let bound = Bound {
            sent_ms: sent,
            server_ms: 5_000_000,
        };
        for target in [
            5_000_000, 5_000_001, 5_000_002, 5_001_000, 5_100_000, 8_600_000,
        ] {
            let when = bound.local_when(target);
            assert!(bound.at(when) >= target, "{target}");
            assert!(when == sent || bound.at(when - 1) < target, "{target}");
        }
        // An hour of local time bounds 3.6 s more of the server's.
        assert_eq!(
            bound.at(sent + 3_600_000),
            5_000_000 + 1 + 3_600_000 + 3_600
        );
    }
}
