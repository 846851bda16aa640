//! Which clock decides, and this process's view of it (SPEC "Time").
//!
//! The database server's clock decides expiry for every machine: each
//! function reads `clock_timestamp()` after taking the pool row's lock, so
//! clients whose clocks disagree can never over-issue or take a live lease.
//! The core still needs a clock to time its waits; [`ServerClock`] is this
//! process's estimate of the server's, its own clock plus an offset measured
//! at connect and refreshed by the listener. An estimate that is off only
//! moves a wake-up: every wake re-checks the table.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime};

use semaphore_core::store::unix_ms;
use semaphore_core::{Clock, ManualClock, Sleep, SystemClock};

/// This process's view of the database server's clock: a local clock plus
/// the offset last measured against the server.
pub struct ServerClock {
    local: Arc<dyn Clock>,
    /// Server minus local, in ms.
    offset_ms: AtomicI64,
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
    pub(crate) fn new(local: Arc<dyn Clock>) -> Self {
        Self {
            local,
            offset_ms: AtomicI64::new(0),
        }
    }

    /// The server's clock minus this process's, as last measured.
    pub fn offset(&self) -> (Duration, bool) {
        let ms = self.offset_ms.load(Ordering::Relaxed);
        (Duration::from_millis(ms.unsigned_abs()), ms >= 0)
    }

    /// Records a reading of the server's clock, `server_ms`, taken between
    /// this process's `before` and `after`: the server read it at about
    /// their midpoint.
    pub(crate) fn observe(&self, before: SystemTime, server_ms: i64, after: SystemTime) {
        let (before, after) = (unix_ms(before) as i64, unix_ms(after) as i64);
        let midpoint = before + (after - before) / 2;
        self.offset_ms
            .store(server_ms - midpoint, Ordering::Relaxed);
    }

    /// The local clock, whose readings [`observe`](Self::observe) takes.
    pub(crate) fn local(&self) -> &dyn Clock {
        &*self.local
    }

    fn shift(&self, t: SystemTime, forward: bool) -> SystemTime {
        let ms = self.offset_ms.load(Ordering::Relaxed);
        let by = Duration::from_millis(ms.unsigned_abs());
        let later = (ms >= 0) == forward;
        if later {
            t.checked_add(by).unwrap_or(t)
        } else {
            t.checked_sub(by).unwrap_or(t)
        }
    }
}

impl Clock for ServerClock {
    fn now(&self) -> SystemTime {
        self.shift(self.local.now(), true)
    }

    fn sleep_until(&self, deadline: SystemTime) -> Sleep {
        self.local.sleep_until(self.shift(deadline, false))
    }
}

/// Which clock decides, and which one times the waits.
#[derive(Debug, Clone)]
pub(crate) enum Time {
    /// The server's clock decides; the view times the waits.
    Server(Arc<ServerClock>),
    /// Test mode: a manual clock decides (passed into every statement) and
    /// times everything.
    #[cfg_attr(not(feature = "test-util"), allow(dead_code))]
    Manual(Arc<ManualClock>),
}

impl Default for Time {
    fn default() -> Self {
        Time::Server(Arc::new(ServerClock::new(Arc::new(SystemClock))))
    }
}

impl Time {
    pub(crate) fn clock(&self) -> &dyn Clock {
        match self {
            Time::Server(view) => &**view,
            Time::Manual(clock) => &**clock,
        }
    }

    /// The explicit now to pass into a statement: `None` (the server reads
    /// its own clock) except in test mode.
    pub(crate) fn now_param(&self) -> Option<i64> {
        match self {
            Time::Server(_) => None,
            Time::Manual(clock) => Some(unix_ms(clock.now()) as i64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_view_adds_the_measured_offset_and_waits_by_it() {
        let local = Arc::new(ManualClock::new());
        let view = ServerClock::new(local.clone());
        let t = local.now();
        // The server read 30 s ahead, halfway through a 10 ms round trip.
        let server = unix_ms(t + Duration::from_millis(5) + Duration::from_secs(30)) as i64;
        view.observe(t, server, t + Duration::from_millis(10));
        assert_eq!(view.offset(), (Duration::from_secs(30), true));
        assert_eq!(view.now(), t + Duration::from_secs(30));
        assert_eq!(view.shift(t + Duration::from_secs(30), false), t);
    }
}
