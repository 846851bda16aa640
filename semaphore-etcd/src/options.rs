//! [`EtcdOptions`]: how an [`EtcdStore`](crate::EtcdStore) connects and
//! names its keys.

use std::time::Duration;

use semaphore_core::store::DecidingClock;

/// Options of [`EtcdStore::connect_with`](crate::EtcdStore::connect_with).
///
/// ```
/// use std::time::Duration;
/// use semaphore_etcd::EtcdOptions;
///
/// let options = EtcdOptions::default()
///     .prefix("jobs")
///     .session_timeout(Duration::from_secs(15));
/// # let _ = options;
/// ```
#[derive(Debug, Clone)]
pub struct EtcdOptions {
    pub(crate) prefix: String,
    pub(crate) connect_timeout: Duration,
    pub(crate) session_timeout: Option<Duration>,
    pub(crate) time: DecidingClock,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        Self {
            prefix: "semaphore".into(),
            connect_timeout: Duration::from_secs(5),
            session_timeout: None,
            time: DecidingClock::default(),
        }
    }
}

impl EtcdOptions {
    /// The prefix of every key the store writes, `semaphore` by default:
    /// stores with different prefixes on one cluster share nothing. 1 to
    /// 64 of `a-z A-Z 0-9 _ - .`; checked by `connect_with`
    /// ([`Error::InvalidArgument`](crate::Error::InvalidArgument) naming
    /// `prefix`).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How long connecting to an endpoint may take before the next is
    /// tried (5 s by default).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }
}

semaphore_core::networked_store_options!(EtcdOptions, "transaction", "cluster");
