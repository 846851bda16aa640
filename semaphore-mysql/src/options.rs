//! [`MysqlOptions`]: how [`MysqlStore`](crate::MysqlStore) connects, where
//! it keeps its tables, and how often waiters look again.

use std::time::Duration;

use semaphore_core::Result;
use semaphore_core::store::{DecidingClock, check_poll_interval, check_pool_size, check_prefix};

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
    /// anything else is refused at connect with [`Error::InvalidArgument`](semaphore_core::Error::InvalidArgument)
    /// naming `table_prefix`. Stores with different prefixes share nothing.
    pub fn table_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.table_prefix = prefix.into();
        self
    }

    /// The most connections the store's pool opens (default 10, at least
    /// 1), besides the one that holds its bound leases.
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size;
        self
    }

    /// How often waiters look at the pool again: MySQL has no
    /// LISTEN/NOTIFY, so this is how a process learns of another's return
    /// (returns in this process wake its waiters at once), and the
    /// heartbeat of a waiting process's place in the cross-machine queue.
    /// A waiter learns of another process's return within this interval
    /// plus one query's round trip (its borrow attempt). Default 100 ms; allowed [`MIN_POLL_INTERVAL`](semaphore_core::store::MIN_POLL_INTERVAL) to
    /// [`MAX_POLL_INTERVAL`](semaphore_core::store::MAX_POLL_INTERVAL), else refused at connect naming
    /// `poll_interval`. Each process with waiters runs one borrow attempt
    /// per waiting pool per interval.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    pub(crate) fn check(&self) -> Result<()> {
        semaphore_core::store::check_session_timeout(self.session_timeout)?;
        check_prefix("table_prefix", &self.table_prefix, 32, "")?;
        check_pool_size(self.pool_size)?;
        check_poll_interval(self.poll_interval)
    }
}

semaphore_core::networked_store_options!(MysqlOptions, "statement", "tables");
