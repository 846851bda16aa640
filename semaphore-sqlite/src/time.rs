//! Which clock decides expiry for a SQLite file, and the check that a
//! process's own clock agrees with it (rule "Time").
//!
//! Every process on one file shares one machine and so one clock. Each
//! transaction reads it inside the transaction, after taking the lock, and
//! decides with that reading: no process can judge a live lease expired,
//! or write one already expired, because its own clock is off. A clock
//! given with [`SqliteOptions::clock`](crate::SqliteOptions::clock) only
//! times this process's waits, and is refused when it strays further than
//! [`MAX_CLOCK_SKEW`] from the machine's, since its waits would then be
//! timed by the wrong instants. Tests decide with a manual clock instead
//! (feature `test-util`).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use semaphore_core::store::unix_ms;
use semaphore_core::{Clock, Error, ManualClock, Result, SystemClock};

/// How far a clock given to [`SqliteOptions::clock`](crate::SqliteOptions::clock)
/// may stray from the machine's before every call is refused with
/// [`Error::ClockSkew`]: 100 ms. Below it, a process's waits end at most
/// that much early or late; each wake re-checks the file, so that costs
/// latency, never a wrong grant.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_millis(100);

/// Which clock decides, and which one times the waits.
#[derive(Clone)]
pub(crate) enum Time {
    /// The machine's clock decides; `view`, if given, times the waits and
    /// must agree with it.
    Machine { view: Option<Arc<dyn Clock>> },
    /// Test mode: a manual clock decides and times everything.
    #[cfg_attr(not(feature = "test-util"), allow(dead_code))]
    Manual(Arc<ManualClock>),
}

impl fmt::Debug for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Time::Machine { view: None } => f.write_str("machine clock"),
            Time::Machine { view: Some(view) } => {
                write!(f, "machine clock, waits timed by {view:?}")
            }
            Time::Manual(clock) => write!(f, "manual clock (test mode) at {:?}", clock.now()),
        }
    }
}

impl Time {
    /// The clock the core times waits with.
    pub(crate) fn clock(&self) -> &dyn Clock {
        match self {
            Time::Machine { view: None } => &SystemClock,
            Time::Machine { view: Some(view) } => &**view,
            Time::Manual(clock) => &**clock,
        }
    }

    /// The deciding instant, in unix ms, read now: call it inside the
    /// transaction that decides.
    ///
    /// # Errors
    /// [`Error::ClockSkew`] if the clock given to the store strays from the
    /// machine's by more than [`MAX_CLOCK_SKEW`].
    pub(crate) fn now(&self) -> Result<i64> {
        let now = match self {
            Time::Machine { view: None } => SystemTime::now(),
            Time::Machine { view: Some(view) } => {
                let machine = SystemTime::now();
                check_skew(view.now(), machine)?;
                machine
            }
            Time::Manual(clock) => clock.now(),
        };
        Ok(ms(now))
    }
}

/// `Ok` if `theirs` is within [`MAX_CLOCK_SKEW`] of `machine`, both read at
/// one instant; a step of the machine's clock moves both and passes.
fn check_skew(theirs: SystemTime, machine: SystemTime) -> Result<()> {
    let (skew, ahead) = match theirs.duration_since(machine) {
        Ok(ahead) => (ahead, true),
        Err(behind) => (behind.duration(), false),
    };
    if skew <= MAX_CLOCK_SKEW {
        return Ok(());
    }
    Err(Error::ClockSkew {
        skew,
        ahead,
        tolerance: MAX_CLOCK_SKEW,
        reference: "machine's clock, which decides for every process on the file",
    })
}

/// `t` in unix ms as SQLite keeps it; `unix_ms` saturates at
/// `MAX_UNIX_MS`, which fits an `i64`.
pub(crate) fn ms(t: SystemTime) -> i64 {
    i64::try_from(unix_ms(t)).unwrap_or(i64::MAX)
}

/// `at + ttl` in unix ms, saturating at `MAX_UNIX_MS`.
pub(crate) fn plus(at: i64, ttl: Duration) -> i64 {
    let max = semaphore_core::store::millis(Duration::MAX);
    at.saturating_add(semaphore_core::store::millis(ttl))
        .min(max)
}

/// A unix ms value read back from the file; a negative one (never written
/// by this store) is the epoch.
pub(crate) fn instant(ms: i64) -> SystemTime {
    semaphore_core::store::from_unix_ms(u64::try_from(ms).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_within_the_tolerance_passes_and_one_beyond_it_is_refused() {
        let machine = SystemTime::now();
        assert!(check_skew(machine + Duration::from_millis(100), machine).is_ok());
        assert!(check_skew(machine - Duration::from_millis(100), machine).is_ok());
        let fast = check_skew(machine + Duration::from_secs(10), machine).unwrap_err();
        assert!(
            matches!(fast, Error::ClockSkew { ahead: true, skew, .. } if skew == Duration::from_secs(10)),
            "{fast:?}"
        );
        let slow = check_skew(machine - Duration::from_secs(10), machine).unwrap_err();
        assert!(slow.to_string().contains("10s behind"), "{slow}");
    }

    /// A step of the system clock moves the machine's reading and a view
    /// built on it alike: nobody is refused.
    #[test]
    fn a_clock_step_that_moves_both_readings_refuses_no_one() {
        let stepped = SystemTime::now() + Duration::from_secs(3600);
        assert!(check_skew(stepped, stepped).is_ok());
    }

    #[test]
    fn times_saturate_and_never_wrap() {
        assert_eq!(
            ms(SystemTime::now() + Duration::from_secs(1 << 50)) as u64,
            semaphore_core::store::MAX_UNIX_MS
        );
        assert_eq!(
            plus(1, Duration::MAX) as u64,
            semaphore_core::store::MAX_UNIX_MS
        );
        assert_eq!(instant(-1), SystemTime::UNIX_EPOCH);
    }
}
