//! [`ServerClock`]: a process's view of a database server's clock, and
//! [`DecidingClock`]: which clock decides, for the stores whose server
//! decides expiry (SPEC "Time").

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime};

use crate::clock::unix_ms;
use crate::{Clock, ManualClock, Sleep, SystemClock};

/// This process's view of a database server's clock, which decides expiry
/// for every machine (SPEC "Time"): a local clock plus the offset last
/// measured against the server. It times the core's waits; an estimate
/// that is off only moves a wake-up, since every wake re-checks the store.
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
    /// A view of `local`, with no offset until the first
    /// [`observe`](Self::observe).
    pub fn new(local: Arc<dyn Clock>) -> Self {
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
    pub fn observe(&self, before: SystemTime, server_ms: i64, after: SystemTime) {
        let (before, after) = (unix_ms(before) as i64, unix_ms(after) as i64);
        let midpoint = before + (after - before) / 2;
        self.offset_ms
            .store(server_ms - midpoint, Ordering::Relaxed);
    }

    /// The local clock, whose readings [`observe`](Self::observe) takes.
    pub fn local(&self) -> &dyn Clock {
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

/// Which clock decides expiry for a store whose server decides, and which
/// one times the core's waits (SPEC "Time").
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
    /// The server's clock, viewed through the system clock.
    fn default() -> Self {
        DecidingClock::Server(Arc::new(ServerClock::new(Arc::new(SystemClock))))
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
