//! [`SqliteOptions`]: how [`SqliteStore`](crate::SqliteStore) opens its file.

use std::sync::Arc;
use std::time::Duration;

use semaphore_core::{Clock, Result};

use crate::time::Time;

/// `PRAGMA synchronous` for the connections the store opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Synchronous {
    /// `NORMAL`, the default: in WAL mode a commit is durable against a
    /// process crash, and the last commits may be lost on a power failure or
    /// OS crash (never corrupting the file).
    #[default]
    Normal,
    /// `FULL`: every commit is synced to disk; slower (see BENCHMARKS.md).
    Full,
}

impl Synchronous {
    pub(crate) fn pragma(self) -> &'static str {
        match self {
            Synchronous::Normal => "NORMAL",
            Synchronous::Full => "FULL",
        }
    }
}

/// Options for [`SqliteStore::open_with`](crate::SqliteStore::open_with).
///
/// ```
/// use std::time::Duration;
/// use semaphore_sqlite::{SqliteOptions, Synchronous};
///
/// let options = SqliteOptions::default()
///     .busy_timeout(Duration::from_secs(2))
///     .synchronous(Synchronous::Full);
/// ```
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    pub(crate) busy_timeout: Duration,
    pub(crate) synchronous: Synchronous,
    pub(crate) poll_interval: Duration,
    pub(crate) time: Time,
    pub(crate) queue_writers: bool,
    /// Whether waiters learn of other processes' commits from the file
    /// watch and the poll, besides rings; off only in test mode.
    pub(crate) fallback_wake_up: bool,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            busy_timeout: Duration::from_secs(5),
            synchronous: Synchronous::Normal,
            poll_interval: Duration::from_secs(1),
            time: Time::Machine { view: None },
            queue_writers: true,
            fallback_wake_up: true,
        }
    }
}

impl SqliteOptions {
    /// How long a statement waits for another connection's lock before it
    /// fails with a retryable [`Error::Storage`](semaphore_core::Error::Storage).
    /// Default 5 s. While it waits it re-tries every 10 µs to 1 ms, not
    /// SQLite's default steps of up to 100 ms, so that contended borrows do
    /// not stall.
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// Whether the store's writes queue in the kernel for the file's write
    /// lock: an exclusive `flock` on the side file
    /// `<database>-semaphore-writer`, taken just before `BEGIN IMMEDIATE`
    /// and released after `COMMIT`, so that when one process commits the
    /// next writer in line takes the lock at once, rather than sleeping
    /// and re-trying in the busy handler. Writers pass a turnstile (a lock
    /// on `<database>-semaphore-turnstile`) while they wait, so processes
    /// take turns and none starves; a waiter tries the lock between thread
    /// yields for about one transaction's length before it sleeps in the
    /// kernel. Default `true`.
    ///
    /// The side lock has no timeout: while another process holds it (for
    /// the length of one short transaction), a write waits for it however
    /// long that takes, beyond [`busy_timeout`](SqliteOptions::busy_timeout).
    /// A holder that dies releases it with its process; one that is
    /// stopped (`SIGSTOP`, a debugger) in the middle of a transaction
    /// holds up every queued writer until it resumes, where without the
    /// queue they would fail after the busy timeout. Turn it off where
    /// writers must fail rather than wait for such a process. Processes
    /// with and without it share a file safely: SQLite's own lock still
    /// decides; the queue only orders those that use it.
    pub fn queue_writers(mut self, queue: bool) -> Self {
        self.queue_writers = queue;
        self
    }

    /// `PRAGMA synchronous` for the store's connections. Default
    /// [`Synchronous::Normal`].
    pub fn synchronous(mut self, synchronous: Synchronous) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// How often waiters re-check the file when no change notification
    /// arrives: the fallback for file systems that report no changes, and
    /// the heartbeat that keeps a waiting process's place in the
    /// cross-process queue. Default 1 s (an idle waiter then costs about
    /// one check a second). Allowed:
    /// [`MIN_POLL_INTERVAL`](semaphore_core::store::MIN_POLL_INTERVAL) (10 ms) to
    /// [`MAX_POLL_INTERVAL`](semaphore_core::store::MAX_POLL_INTERVAL) (1.5 s); [`SqliteStore::open_with`] refuses
    /// anything else with [`Error::InvalidArgument`](semaphore_core::Error::InvalidArgument) naming
    /// `poll_interval`.
    ///
    /// [`SqliteStore::open_with`]: crate::SqliteStore::open_with
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// The clock by which this process times its waits; the system clock
    /// by default, which is what production wants.
    ///
    /// Expiry is never judged by it (rule "Time"): every process sharing a
    /// file decides with the one clock they all share, the machine's, read
    /// inside each transaction, so that no process can take a live lease's
    /// slot or write a lease already expired. A clock that disagrees with
    /// the machine's by more than [`MAX_CLOCK_SKEW`](crate::MAX_CLOCK_SKEW)
    /// would time its waits wrong, so every call through the store then
    /// fails with [`Error::ClockSkew`](semaphore_core::Error::ClockSkew), changing nothing. A step of the
    /// system clock (NTP) moves every process at once and refuses no one.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.time = Time::Machine { view: Some(clock) };
        self
    }

    /// Test mode (feature `test-util`): `clock` decides expiry and times
    /// every wait, so that tests move time without sleeping (rule "Time":
    /// the store takes an explicit now in test mode). Every store handle on
    /// the file must then share this clock: never open a production file
    /// in test mode.
    #[cfg(feature = "test-util")]
    pub fn manual_clock(mut self, clock: Arc<semaphore_core::ManualClock>) -> Self {
        self.time = Time::Manual(clock);
        self
    }

    /// Test mode (feature `test-util`): waiters learn of other processes'
    /// commits only when those processes ring them (Linux), with neither
    /// the file watch nor the poll to fall back on, so that a test can show
    /// what the rings alone do. A waiter's place in the cross-process queue
    /// is then refreshed only by its own re-checks.
    #[cfg(feature = "test-util")]
    pub fn rings_only(mut self) -> Self {
        self.fallback_wake_up = false;
        self
    }

    /// Checks the options, naming the first field out of range.
    pub(crate) fn check(&self) -> Result<()> {
        semaphore_core::store::check_poll_interval(self.poll_interval)
    }
}
