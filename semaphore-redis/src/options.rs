//! [`RedisOptions`]: how [`RedisStore`](crate::RedisStore) connects, where
//! it keeps its keys, and how long it distrusts a server that restarted.

use std::time::Duration;

use semaphore_core::store::{DecidingClock, check_poll_interval, check_prefix};
use semaphore_core::{Error, Result};

/// Options for [`RedisStore::connect_with`](crate::RedisStore::connect_with).
///
/// ```
/// use std::time::Duration;
/// use semaphore_redis::RedisOptions;
///
/// let options = RedisOptions::default()
///     .prefix("limits")
///     .restart_grace(Duration::from_secs(600)); // the longest ttl we use
/// ```
#[derive(Debug, Clone)]
pub struct RedisOptions {
    pub(crate) session_timeout: Option<Duration>,
    pub(crate) prefix: String,
    pub(crate) poll_interval: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) restart_grace: Duration,
    pub(crate) time: DecidingClock,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            session_timeout: None,
            prefix: "semaphore".into(),
            poll_interval: Duration::from_secs(1),
            response_timeout: Duration::from_secs(5),
            restart_grace: Duration::from_secs(60),
            time: DecidingClock::default(),
        }
    }
}

impl RedisOptions {
    /// The prefix of every key and of the wake-up channel: keys are
    /// `PREFIX:{<pool id>}:...`. Default `semaphore`. 1 to 64 of `a-z`,
    /// `A-Z`, `0-9`, `_`, `-`, `.`; anything else is refused at connect with
    /// [`Error::InvalidArgument`](semaphore_core::Error::InvalidArgument) naming `prefix`. Stores with different
    /// prefixes share nothing.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How often waiters re-check the pool when no message arrives: the
    /// fallback for lost messages, and the heartbeat of a waiting process's
    /// place in the cross-machine queue. Default 1 s; allowed
    /// [`MIN_POLL_INTERVAL`](semaphore_core::store::MIN_POLL_INTERVAL) to
    /// [`MAX_POLL_INTERVAL`](semaphore_core::store::MAX_POLL_INTERVAL), else refused at
    /// connect naming `poll_interval`.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// How long a call waits for the server's answer (and a connect for the
    /// connection) before it fails with a retryable [`Error::Storage`](semaphore_core::Error::Storage): a
    /// stalled server (`CLIENT PAUSE`, a long script of someone else's)
    /// gives an error, never a hang. Default 5 s; at least 1 ms.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// The restart grace: after the server restarts or fails over (its run
    /// id changes), nothing is granted until this long after the first
    /// grant that notices; on a server that kept none of the store's keys,
    /// until this long after it started. Default 60 s; at least the
    /// session timeout. A ttl longer than it is refused
    /// ([`Error::InvalidArgument`](semaphore_core::Error::InvalidArgument)
    /// naming `ttl`): set it to the longest ttl your leases use.
    ///
    /// Why: Redis often runs without persistence, or with snapshots and
    /// `appendfsync everysec`, and a restart or a failover then loses the
    /// newest pools and leases while their holders still run. The pools
    /// come back when the application registers them again, and without a
    /// grace they would hand the held slots out a second time (rule
    /// "Restart grace").
    /// `Duration::ZERO` turns it off (tests on a fresh server; a server
    /// whose data always survives a restart).
    pub fn restart_grace(mut self, grace: Duration) -> Self {
        self.restart_grace = grace;
        self
    }

    pub(crate) fn check(&self) -> Result<()> {
        semaphore_core::store::check_session_timeout(self.session_timeout)?;
        check_prefix("prefix", &self.prefix, 64, "-.")?;
        check_poll_interval(self.poll_interval)?;
        if self.response_timeout < Duration::from_millis(1) {
            return Err(Error::InvalidArgument {
                field: "response_timeout",
                allowed: "1 ms or more".into(),
                got: format!("{:?}", self.response_timeout),
            });
        }
        Ok(())
    }
}

semaphore_core::networked_store_options!(RedisOptions, "script", "prefix");
