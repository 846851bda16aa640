//! [`OffsetClock`]: a machine whose clock disagrees with the server's.

use std::time::{Duration, SystemTime};

use crate::{Clock, Sleep, SystemClock};

/// The system clock, off by a fixed amount: a machine whose clock
/// disagrees with the server's, for tests.
#[derive(Debug, Clone, Copy)]
pub struct OffsetClock {
    by: Duration,
    ahead: bool,
}

impl OffsetClock {
    /// A clock `by` ahead of the system clock.
    pub fn ahead(by: Duration) -> Self {
        Self { by, ahead: true }
    }

    /// A clock `by` behind the system clock.
    pub fn behind(by: Duration) -> Self {
        Self { by, ahead: false }
    }

    fn shift(&self, t: SystemTime, forward: bool) -> SystemTime {
        if self.ahead == forward {
            t + self.by
        } else {
            t - self.by
        }
    }
}

impl Clock for OffsetClock {
    fn now(&self) -> SystemTime {
        self.shift(SystemTime::now(), true)
    }

    fn sleep_until(&self, deadline: SystemTime) -> Sleep {
        SystemClock.sleep_until(self.shift(deadline, false))
    }
}
