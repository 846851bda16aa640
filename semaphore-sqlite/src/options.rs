//! [`SqliteOptions`]: how [`SqliteStore`](crate::SqliteStore) opens its file.

use std::sync::Arc;
use std::time::Duration;

use semaphore_core::{Clock, SystemClock};

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
    pub(crate) clock: Arc<dyn Clock>,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            busy_timeout: Duration::from_secs(5),
            synchronous: Synchronous::Normal,
            poll_interval: Duration::from_secs(1),
            clock: Arc::new(SystemClock),
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
    /// one check a second); at most 1.5 s, longer is clamped.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval.min(Duration::from_millis(1500));
        self
    }

    /// The clock times come from; [`SystemClock`] by default. Processes
    /// sharing a file must share wall-clock time.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }
}
