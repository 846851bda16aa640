//! [`MysqlOptions`]: how [`MysqlStore`](crate::MysqlStore) connects, where
//! it keeps its tables, and how often waiters look again.

use std::sync::Arc;
use std::time::Duration;

use semaphore_core::store::{DecidingClock, ServerClock};
use semaphore_core::{Clock, Error, Result};

/// The shortest [`MysqlOptions::poll_interval`].
pub const MIN_POLL_INTERVAL: Duration = Duration::from_millis(10);

/// The longest [`MysqlOptions::poll_interval`]: it is also the heartbeat of
/// a waiting process's place in the cross-machine queue, which others drop
/// after three of these (4.5 s) without one.
pub const MAX_POLL_INTERVAL: Duration = Duration::from_millis(1500);

/// How long a queued head's place outlives its last look (ms): three of the
/// longest poll intervals.
pub(crate) const WAITER_TTL_MS: i64 = 3 * MAX_POLL_INTERVAL.as_millis() as i64;

/// Options for [`MysqlStore::connect_with`](crate::MysqlStore::connect_with).
///
/// ```
/// use std::time::Duration;
/// use semaphore_mysql::MysqlOptions;
///
/// let options = MysqlOptions::default()
///     .table_prefix("limits")
///     .poll_interval(Duration::from_millis(50)); // faster cross-machine wake-ups
/// ```
#[derive(Debug, Clone)]
pub struct MysqlOptions {
    pub(crate) session_timeout: Option<Duration>,
    pub(crate) table_prefix: String,
    pub(crate) pool_size: usize,
    pub(crate) poll_interval: Duration,
    pub(crate) time: DecidingClock,
}

impl Default for MysqlOptions {
    fn default() -> Self {
        Self {
            session_timeout: None,
            table_prefix: "semaphore".into(),
            pool_size: 10,
            poll_interval: Duration::from_millis(100),
            time: DecidingClock::default(),
        }
    }
}

impl MysqlOptions {
    /// The prefix of the store's four tables (`PREFIX_store`,
    /// `PREFIX_pools`, `PREFIX_leases`, `PREFIX_waiters`) in the URL's
    /// database. Default `semaphore`. 1 to 32 of `a-z`, `A-Z`, `0-9`, `_`;
    /// anything else is refused at connect with [`Error::InvalidArgument`]
    /// naming `table_prefix`. Stores with different prefixes share nothing.
    pub fn table_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.table_prefix = prefix.into();
        self
    }

    /// The most connections the store's pool opens (default 10, at least
    /// 1), besides the one that holds its bound leases (R16).
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size;
        self
    }

    /// How often waiters look at the pool again: MySQL has no
    /// LISTEN/NOTIFY, so this is how a process learns of another's return
    /// (returns in this process wake its waiters at once), and the
    /// heartbeat of a waiting process's place in the cross-machine queue.
    /// Default 100 ms; allowed [`MIN_POLL_INTERVAL`] to
    /// [`MAX_POLL_INTERVAL`], else refused at connect naming
    /// `poll_interval`. Each process with waiters runs one borrow attempt
    /// per waiting pool per interval.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// This process's clock, from which the store's view of the server's
    /// clock is made (its readings plus a measured offset); the system
    /// clock by default. It never decides expiry: the server does, so a
    /// process whose clock is off can neither over-issue nor take a live
    /// lease (SPEC "Time").
    pub fn clock(mut self, local: Arc<dyn Clock>) -> Self {
        self.time = DecidingClock::Server(Arc::new(ServerClock::new(local)));
        self
    }

    /// Test mode (feature `test-util`): `clock` decides expiry, passed into
    /// every statement in place of the server's clock, and times every
    /// wait, so that tests move time without sleeping. Every store on the
    /// tables must then share this clock: never use it on production tables.
    #[cfg(feature = "test-util")]
    pub fn manual_clock(mut self, clock: Arc<semaphore_core::ManualClock>) -> Self {
        self.time = DecidingClock::Manual(clock);
        self
    }

    /// The session timeout (R16, amended): how long the store's session,
    /// which holds its bound leases, outlives its last heartbeat on the
    /// server's clock. A connection that drops and comes back within it
    /// keeps every bound lease; a process killed outright loses them
    /// within it. The store heartbeats every third of it. Default 10 s
    /// (in test mode, the longest there is); at least
    /// [`MIN_SESSION_TIMEOUT`](semaphore_core::store::MIN_SESSION_TIMEOUT)
    /// (1 s), else refused at connect naming `session_timeout`.
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = Some(timeout);
        self
    }

    pub(crate) fn check(&self) -> Result<()> {
        semaphore_core::store::check_session_timeout(self.session_timeout)?;
        let allowed = |c: char| c.is_ascii_alphanumeric() || c == '_';
        let prefix = &self.table_prefix;
        if prefix.is_empty() || prefix.len() > 32 || !prefix.chars().all(allowed) {
            return Err(Error::InvalidArgument {
                field: "table_prefix",
                allowed: "1 to 32 of a-z, A-Z, 0-9, _".into(),
                got: format!("{:?}", prefix.chars().take(80).collect::<String>()),
            });
        }
        if self.pool_size == 0 {
            return Err(Error::InvalidArgument {
                field: "pool_size",
                allowed: "1 or more".into(),
                got: "0".into(),
            });
        }
        if !(MIN_POLL_INTERVAL..=MAX_POLL_INTERVAL).contains(&self.poll_interval) {
            return Err(Error::InvalidArgument {
                field: "poll_interval",
                allowed: format!("{MIN_POLL_INTERVAL:?}..={MAX_POLL_INTERVAL:?}"),
                got: format!("{:?}", self.poll_interval),
            });
        }
        Ok(())
    }
}
