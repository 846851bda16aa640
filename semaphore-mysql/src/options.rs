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
    /// Test mode: no poll, rings alone wake waiters.
    pub(crate) rings_only: bool,
}

impl Default for MysqlOptions {
    fn default() -> Self {
        Self {
            session_timeout: None,
            table_prefix: "semaphore".into(),
            pool_size: 10,
            poll_interval: Duration::from_millis(100),
            time: DecidingClock::default(),
            rings_only: false,
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
    /// 1), besides three of the store's own: its session's heartbeat, its
    /// link (which marks its waiters alive and is rung) and the link's bell.
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size;
        self
    }

    /// How often waiters look at the pool again. MySQL has no
    /// LISTEN/NOTIFY: a return in another process rings the heads its freed
    /// slots are owed to (it interrupts the statement their store's link
    /// waits in, with `KILL QUERY`, once its delete has committed), and
    /// this poll is how a process learns of what no ring tells: a ring
    /// that landed between two of the link's statements, a ring the server
    /// refused (a return by another MySQL user, without `CONNECTION
    /// ADMIN`), a head that left the line, a count raised, a drain ended,
    /// a lease that expired. Returns in this process wake its waiters at
    /// once. Each poll of a waiting head is also the heartbeat of its place
    /// in the cross-machine queue. Default 100 ms; allowed [`MIN_POLL_INTERVAL`](semaphore_core::store::MIN_POLL_INTERVAL) to
    /// [`MAX_POLL_INTERVAL`](semaphore_core::store::MAX_POLL_INTERVAL), else refused at connect naming
    /// `poll_interval`. Each process with waiters runs one borrow attempt
    /// per waiting pool per interval.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// Test mode (feature `test-util`): waiters learn of other processes'
    /// returns only when those ring them, with no poll to fall back on, so
    /// that a test can show what the rings alone do.
    #[cfg(feature = "test-util")]
    pub fn rings_only(mut self) -> Self {
        self.rings_only = true;
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
