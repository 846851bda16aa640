//! Time: the [`Clock`] trait, [`SystemClock`] and [`ManualClock`]
//! (rule "Stores": time comes from a clock the store is given).
//!
//! The shape follows governor's `clock.rs`: a real clock for production and a
//! fake one that tests advance, so that expiry is tested without sleeping.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

/// A boxed future that completes when a clock reaches a deadline.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A source of wall-clock time, and a way to sleep until a wall-clock
/// instant on that same time line.
///
/// Expiries are wall-clock times because a SQLite file is shared by processes
/// that share no monotonic clock. The core reads `now` from the store's clock
/// to time its waits and hands it to the store; which clock *decides* expiry
/// is the store's (rule "Time", and the [`Store`](crate::store::Store) contract):
/// for a store shared by processes or machines, the one clock they share,
/// read inside the deciding step.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current wall-clock time.
    fn now(&self) -> SystemTime;

    /// [`now`](Clock::now) in whole unix milliseconds: what an in-process
    /// store's step reads. The provided method converts `now()`; a clock
    /// that can read milliseconds more cheaply says so.
    fn now_ms(&self) -> UnixMs {
        self.now().into()
    }

    /// A future that completes no earlier than this clock's `now()` reaching
    /// `deadline`, or soon after if the clock can only approximate it. The
    /// core re-checks the store after every wake-up, so an early or spurious
    /// completion costs one extra check, never correctness.
    fn sleep_until(&self, deadline: SystemTime) -> Sleep;
}

/// The real clock: [`SystemTime::now`], sleeping with tokio's timer.
///
/// Under `tokio::time::pause` tokio's timer jumps but `SystemTime` does not;
/// tests that need to move time use [`ManualClock`] instead.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }

    fn now_ms(&self) -> UnixMs {
        system_now_ms()
    }

    /// Sleeps on tokio's timer, reading the clock again at least every
    /// second: the timer's clock stops while the machine is
    /// suspended, and this one does not.
    fn sleep_until(&self, deadline: SystemTime) -> Sleep {
        sleep_rechecking(SystemTime::now, deadline)
    }
}

/// The longest a sleep on a real clock ([`SystemClock`],
/// [`MonotonicClock`], and the [`ServerClock`](crate::store::ServerClock)
/// views over them) goes without reading its clock again: 1 s.
///
/// tokio's timer runs on `CLOCK_MONOTONIC`, which stops while the machine
/// is suspended; the clocks that decide (the system clock, and
/// `CLOCK_BOOTTIME` under [`MonotonicClock`]) go on. A sleep that only
/// trusted the timer would end late by the time the machine slept, and a
/// holder waiting on [`LeaseGuard::lost`](crate::LeaseGuard::lost) would
/// go on believing it holds a lease another process was granted meanwhile
/// (a holder must know first across a suspend too). Reading the deciding clock once a second bounds
/// that lateness to a second.
pub(crate) const RECHECK: Duration = Duration::from_secs(1);

/// A sleep until `now()` reaches `deadline`, on tokio's timer in steps of
/// at most [`RECHECK`].
fn sleep_rechecking(now: impl Fn() -> SystemTime + Send + 'static, deadline: SystemTime) -> Sleep {
    Box::pin(async move {
        while let Ok(left) = deadline.duration_since(now()) {
            if left.is_zero() {
                return;
            }
            tokio::time::sleep(left.min(RECHECK)).await;
        }
    })
}

/// This process's own monotonic clock, read as wall-clock time: the
/// system clock's reading when it was made, plus the time elapsed since on
/// a clock that never steps (Linux's `CLOCK_BOOTTIME`, which also counts
/// time the machine spent suspended; elsewhere [`std::time::Instant`]).
///
/// A networked store's [`ServerClock`](crate::store::ServerClock) views the
/// server's clock through it, so that a holder's local deadlines move
/// neither when an administrator or NTP steps the system clock nor when the
/// machine sleeps. Sleeps use tokio's timer, reading this clock again at
/// least every second. Outside Linux, [`std::time::Instant`] may stop while
/// the machine sleeps (macOS's does): there a suspended machine's holders
/// learn of a lost lease up to the time slept late (the holder knows
/// first across a suspend on Linux).
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    wall: SystemTime,
    start: Duration,
    /// Time since a fixed origin: [`elapsed`], or a test's own.
    elapsed: fn() -> Duration,
}

impl MonotonicClock {
    /// A clock that reads the system clock's time now, and moves on from
    /// there monotonically.
    pub fn new() -> Self {
        Self::counting(elapsed)
    }

    /// A clock that moves on with `elapsed` (time since a fixed origin).
    fn counting(elapsed: fn() -> Duration) -> Self {
        Self {
            wall: SystemTime::now(),
            start: elapsed(),
            elapsed,
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

/// Time on the monotonic clock since an arbitrary fixed origin.
#[cfg(target_os = "linux")]
fn elapsed() -> Duration {
    use nix::time::{ClockId, clock_gettime};
    match clock_gettime(ClockId::CLOCK_BOOTTIME) {
        Ok(t) => Duration::new(t.tv_sec() as u64, t.tv_nsec() as u32),
        Err(_) => instant_elapsed(),
    }
}

#[cfg(not(target_os = "linux"))]
fn elapsed() -> Duration {
    instant_elapsed()
}

fn instant_elapsed() -> Duration {
    static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    ORIGIN.get_or_init(std::time::Instant::now).elapsed()
}

impl Clock for MonotonicClock {
    fn now(&self) -> SystemTime {
        saturating_add(self.wall, (self.elapsed)().saturating_sub(self.start))
    }

    /// Sleeps on tokio's timer, reading this clock again at least every
    /// second: the timer stops while the machine is suspended, and
    /// this clock counts that time.
    fn sleep_until(&self, deadline: SystemTime) -> Sleep {
        let clock = *self;
        sleep_rechecking(move || clock.now(), deadline)
    }
}

/// A clock that moves only when told to, for tests (governor's
/// `FakeRelativeClock`).
///
/// It starts at a fixed instant (2030-01-01T00:00:00Z), so runs are
/// repeatable. [`ManualClock::advance`] wakes every
/// [`sleep_until`](Clock::sleep_until) whose deadline it reaches; nothing else
/// ever does, so a waiter's deadline passes only when a test says so.
///
/// ```
/// use std::time::Duration;
/// use semaphore_core::{Clock, ManualClock};
///
/// let clock = ManualClock::new();
/// let t0 = clock.now();
/// clock.advance(Duration::from_secs(5));
/// assert_eq!(clock.now().duration_since(t0).unwrap(), Duration::from_secs(5));
/// ```
#[derive(Debug)]
pub struct ManualClock {
    now: watch::Sender<SystemTime>,
}

/// Where a [`ManualClock`] starts: 2030-01-01T00:00:00Z.
const MANUAL_EPOCH: Duration = Duration::from_secs(1_893_456_000);

impl ManualClock {
    /// A clock standing at 2030-01-01T00:00:00Z.
    pub fn new() -> Self {
        Self::starting_at(UNIX_EPOCH + MANUAL_EPOCH)
    }

    /// A clock standing at `start`.
    pub fn starting_at(start: SystemTime) -> Self {
        Self {
            now: watch::Sender::new(start),
        }
    }

    /// Moves the clock forward by `by` and wakes the sleepers it reaches.
    /// Saturates at [`MAX_UNIX_MS`], the last instant stores keep.
    pub fn advance(&self, by: Duration) {
        self.now.send_modify(|t| *t = saturating_add(*t, by));
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        *self.now.borrow()
    }

    fn sleep_until(&self, deadline: SystemTime) -> Sleep {
        let mut rx = self.now.subscribe();
        Box::pin(async move {
            // The sender lives as long as the clock; if the clock is gone,
            // time never moves again and the sleep never ends.
            if rx.wait_for(|now| *now >= deadline).await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    }
}

/// The last instant any store keeps, in unix milliseconds:
/// 9999-12-31T23:59:59.999Z.
///
/// Every time the library computes (an expiry `now + ttl`, a wait's
/// deadline `start + wait`) saturates here instead of wrapping or panicking,
/// however large [`Limits::max_ttl`](crate::Limits::max_ttl) or
/// [`Limits::max_wait`](crate::Limits::max_wait) is set, so that every
/// store can represent it: a SQLite or PostgreSQL `bigint`, a PostgreSQL
/// `timestamptz`, and a JSON number of seconds (below 2^53) all hold it. A
/// lease that expires then is, in practice, held until returned; all stores
/// answer alike for it.
pub const MAX_UNIX_MS: u64 = 253_402_300_799_999;

/// The instant [`MAX_UNIX_MS`] names.
pub fn max_time() -> SystemTime {
    // Computed once: every expiry is clamped to it.
    static MAX: std::sync::LazyLock<SystemTime> =
        std::sync::LazyLock::new(|| UNIX_EPOCH + Duration::from_millis(MAX_UNIX_MS));
    *MAX
}

/// `t + d`, saturating at [`max_time`]: how the library computes every
/// expiry and deadline, so that no `ttl` or `wait` can overflow or wrap.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use semaphore_core::store::{max_time, saturating_add};
///
/// assert_eq!(saturating_add(SystemTime::now(), Duration::MAX), max_time());
/// ```
pub fn saturating_add(t: SystemTime, d: Duration) -> SystemTime {
    t.checked_add(d)
        .map_or_else(max_time, |sum| sum.min(max_time()))
}

/// `t` truncated to whole milliseconds since the Unix epoch, the resolution
/// at which stores keep times (rule "Stores": integer unix ms).
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use semaphore_core::store::truncate_ms;
///
/// let t = UNIX_EPOCH + Duration::from_micros(1_500_700);
/// assert_eq!(truncate_ms(t), UNIX_EPOCH + Duration::from_millis(1_500));
/// ```
pub fn truncate_ms(t: SystemTime) -> SystemTime {
    match t.duration_since(UNIX_EPOCH) {
        // The common case: subtract the part below a millisecond, with no
        // conversion to milliseconds and back.
        Ok(d) if d.as_secs() < MAX_UNIX_MS / 1000 => {
            t - Duration::from_nanos(u64::from(d.subsec_nanos() % 1_000_000))
        }
        _ => from_unix_ms(unix_ms(t)),
    }
}

/// `t` as whole milliseconds since the Unix epoch, between 0 (for times
/// before the epoch) and [`MAX_UNIX_MS`] (for times after it): a value
/// that fits an `i64` and every store's time column.
pub fn unix_ms(t: SystemTime) -> u64 {
    let Ok(d) = t.duration_since(UNIX_EPOCH) else {
        return 0;
    };
    // Seconds and milliseconds apart: `Duration::as_millis` divides a u128.
    d.as_secs()
        .checked_mul(1000)
        .and_then(|ms| ms.checked_add(u64::from(d.subsec_millis())))
        .map_or(MAX_UNIX_MS, |ms| ms.min(MAX_UNIX_MS))
}

/// The inverse of [`unix_ms`]; `ms` above [`MAX_UNIX_MS`] is
/// [`max_time`].
pub fn from_unix_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms.min(MAX_UNIX_MS))
}

/// An instant as stores keep it (rule "Stores": integer unix ms): whole
/// milliseconds since the Unix epoch, from 0 to [`MAX_UNIX_MS`]. What
/// [`Clock::now_ms`] reads and the in-process [`SlotTable`](crate::store::SlotTable)
/// compares: an integer, so that a step's reading, its expiries and their
/// comparisons cost a few instructions each.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use semaphore_core::store::UnixMs;
///
/// let t = UnixMs::from(UNIX_EPOCH + Duration::from_micros(1_500_700));
/// assert_eq!(t.get(), 1_500);
/// assert_eq!(t.saturating_add(Duration::from_secs(1)).get(), 2_500);
/// assert_eq!(UnixMs::MAX.saturating_add(Duration::MAX), UnixMs::MAX);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UnixMs(u64);

impl UnixMs {
    /// The last instant stores keep, [`MAX_UNIX_MS`].
    pub const MAX: Self = Self(MAX_UNIX_MS);

    /// `ms` milliseconds after the epoch, at most [`MAX_UNIX_MS`].
    pub const fn from_ms(ms: u64) -> Self {
        Self(if ms < MAX_UNIX_MS { ms } else { MAX_UNIX_MS })
    }

    /// The milliseconds since the epoch.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// This instant `d` later, to whole milliseconds (`d`'s part below a
    /// millisecond dropped), saturating at [`UnixMs::MAX`].
    pub fn saturating_add(self, d: Duration) -> Self {
        let ms = d
            .as_secs()
            .saturating_mul(1000)
            .saturating_add(u64::from(d.subsec_millis()));
        Self::from_ms(self.0.saturating_add(ms))
    }

    /// This instant as a [`SystemTime`].
    pub fn to_system_time(self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.0)
    }
}

impl From<SystemTime> for UnixMs {
    /// `t` truncated to whole milliseconds ([`unix_ms`]).
    fn from(t: SystemTime) -> Self {
        Self(unix_ms(t))
    }
}

impl From<UnixMs> for SystemTime {
    fn from(t: UnixMs) -> Self {
        t.to_system_time()
    }
}

/// The system's wall clock in whole unix milliseconds, read with
/// `clock_gettime(CLOCK_REALTIME)` (the clock [`SystemTime::now`] reads)
/// without [`SystemTime`]'s general subtraction from the epoch.
#[cfg(any(
    target_os = "linux",
    target_os = "android",
    target_os = "macos",
    target_os = "freebsd"
))]
fn system_now_ms() -> UnixMs {
    use nix::time::{ClockId, clock_gettime};
    match clock_gettime(ClockId::CLOCK_REALTIME) {
        // The common case: a time between the epoch and MAX_UNIX_MS, where
        // the sum cannot overflow (tv_nsec is below 10^9).
        Ok(t) if t.tv_sec() >= 0 && (t.tv_sec() as u64) < MAX_UNIX_MS / 1000 => {
            UnixMs(t.tv_sec() as u64 * 1000 + t.tv_nsec() as u64 / 1_000_000)
        }
        // Before the epoch or past MAX_UNIX_MS (a clock set wrong), or
        // no reading: as SystemTime's.
        _ => SystemTime::now().into(),
    }
}

#[cfg(not(any(
    target_os = "linux",
    target_os = "android",
    target_os = "macos",
    target_os = "freebsd"
)))]
fn system_now_ms() -> UnixMs {
    SystemTime::now().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::{Context, Poll, Waker};

    #[test]
    fn manual_sleep_completes_only_when_advanced_to_deadline() {
        let clock = ManualClock::new();
        let mut sleep = clock.sleep_until(clock.now() + Duration::from_secs(10));
        let mut cx = Context::from_waker(Waker::noop());
        assert!(sleep.as_mut().poll(&mut cx).is_pending());
        clock.advance(Duration::from_secs(9));
        assert!(sleep.as_mut().poll(&mut cx).is_pending());
        clock.advance(Duration::from_secs(1));
        assert_eq!(sleep.as_mut().poll(&mut cx), Poll::Ready(()));
    }

    /// A `CLOCK_BOOTTIME` that a test moves: the machine's suspend.
    static SUSPENDED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

    fn boottime_with_suspends() -> Duration {
        let since = {
            static ORIGIN: std::sync::OnceLock<tokio::time::Instant> = std::sync::OnceLock::new();
            ORIGIN.get_or_init(tokio::time::Instant::now).elapsed()
        };
        since + Duration::from_millis(SUSPENDED.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// The holder knows first across a suspend: the machine sleeps 60 s (the deciding clock
    /// jumps, tokio's timer does not move and no timer fires); a sleep until
    /// a deadline the jump passed ends within a second of tokio's time, not
    /// 60 s later. Through a server view too, as a networked store's holder
    /// waits.
    #[tokio::test(start_paused = true)]
    async fn a_sleep_sees_the_clock_jump_of_a_suspend_within_a_second() {
        let clock = MonotonicClock::counting(boottime_with_suspends);
        let view = crate::server_clock::ServerClock::new(std::sync::Arc::new(clock));
        let deadline = clock.now() + Duration::from_secs(60);
        let mut sleeps = [clock.sleep_until(deadline), view.sleep_until(deadline)];
        let mut cx = Context::from_waker(Waker::noop());
        for sleep in &mut sleeps {
            assert!(sleep.as_mut().poll(&mut cx).is_pending());
        }
        SUSPENDED.fetch_add(60_000, std::sync::atomic::Ordering::SeqCst);
        assert!(clock.now() >= deadline);
        tokio::time::advance(RECHECK).await;
        for sleep in &mut sleeps {
            assert_eq!(sleep.as_mut().poll(&mut cx), Poll::Ready(()));
        }
    }

    #[test]
    fn ms_round_trip_truncates() {
        let t = UNIX_EPOCH + Duration::from_micros(1_500_700);
        assert_eq!(unix_ms(t), 1500);
        assert_eq!(truncate_ms(t), from_unix_ms(1500));
        assert_eq!(unix_ms(UNIX_EPOCH - Duration::from_secs(1)), 0);
    }

    #[test]
    fn truncation_agrees_with_the_ms_round_trip_at_every_range() {
        let times = [
            UNIX_EPOCH - Duration::from_nanos(1),
            UNIX_EPOCH,
            UNIX_EPOCH + Duration::from_nanos(999_999),
            UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789),
            max_time() - Duration::from_nanos(1),
            max_time(),
            max_time() + Duration::from_secs(1),
        ];
        for t in times {
            assert_eq!(truncate_ms(t), from_unix_ms(unix_ms(t)), "{t:?}");
        }
    }

    /// no ttl or wait overflows, panics or wraps.
    #[test]
    fn times_saturate_at_the_last_instant_stores_keep() {
        let now = SystemTime::now();
        assert_eq!(saturating_add(now, Duration::MAX), max_time());
        assert_eq!(unix_ms(saturating_add(now, Duration::MAX)), MAX_UNIX_MS);
        assert!(i64::try_from(unix_ms(now + Duration::from_secs(1 << 40))).is_ok());
        assert_eq!(from_unix_ms(u64::MAX), max_time());
        let clock = ManualClock::new();
        clock.advance(Duration::MAX);
        assert_eq!(clock.now(), max_time());
    }
}
