//! [`RedisOptions`]: how [`RedisStore`](crate::RedisStore) connects, where
//! it keeps its keys, and how long it distrusts a server that restarted.

use std::sync::Arc;
use std::time::Duration;

use semaphore_core::store::{DecidingClock, ServerClock};
use semaphore_core::{Clock, Error, Result};

/// The shortest [`RedisOptions::poll_interval`].
pub const MIN_POLL_INTERVAL: Duration = Duration::from_millis(10);

/// The longest [`RedisOptions::poll_interval`]: it is also the heartbeat of
/// a waiting process's place in the cross-machine queue, which others drop
/// after three of these (4.5 s) without one.
pub const MAX_POLL_INTERVAL: Duration = Duration::from_millis(1500);

/// How long a queued head's place outlives its last look (ms): three of the
/// longest poll intervals.
pub(crate) const WAITER_TTL_MS: u64 = 3 * MAX_POLL_INTERVAL.as_millis() as u64;

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
    /// [`Error::InvalidArgument`] naming `prefix`. Stores with different
    /// prefixes share nothing.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How often waiters re-check the pool when no message arrives: the
    /// fallback for lost messages, and the heartbeat of a waiting process's
    /// place in the cross-machine queue. Default 1 s; allowed
    /// [`MIN_POLL_INTERVAL`] to [`MAX_POLL_INTERVAL`], else refused at
    /// connect naming `poll_interval`.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// How long a call waits for the server's answer (and a connect for the
    /// connection) before it fails with a retryable [`Error::Storage`]: a
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
    /// grace they would hand the held slots out a second time (SPEC fourth
    /// round, "Restart grace, for every loss of state").
    /// `Duration::ZERO` turns it off (tests on a fresh server; a server
    /// whose data always survives a restart).
    pub fn restart_grace(mut self, grace: Duration) -> Self {
        self.restart_grace = grace;
        self
    }

    /// This process's clock, from which the store's view of the server's
    /// clock is made (an upper bound from its readings,
    /// [`ServerClock`]); by default the
    /// machine's monotonic clock, which does not step
    /// ([`MonotonicClock`](semaphore_core::MonotonicClock)). It never decides expiry: the server does, so a
    /// process whose clock is off can neither over-issue nor take a live
    /// lease (SPEC "Time").
    pub fn clock(mut self, local: Arc<dyn Clock>) -> Self {
        self.time = DecidingClock::Server(Arc::new(ServerClock::new(local)));
        self
    }

    /// Test mode (feature `test-util`): `clock` decides expiry, passed into
    /// every script in place of the server's clock, and times every wait,
    /// so that tests move time without sleeping. Every store on the prefix
    /// must then share this clock: never use it on production keys.
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
        let allowed = |c: char| c.is_ascii_alphanumeric() || "_-.".contains(c);
        if self.prefix.is_empty() || self.prefix.len() > 64 || !self.prefix.chars().all(allowed) {
            return Err(Error::InvalidArgument {
                field: "prefix",
                allowed: "1 to 64 of a-z, A-Z, 0-9, _, -, .".into(),
                got: format!("{:?}", self.prefix.chars().take(80).collect::<String>()),
            });
        }
        if !(MIN_POLL_INTERVAL..=MAX_POLL_INTERVAL).contains(&self.poll_interval) {
            return Err(Error::InvalidArgument {
                field: "poll_interval",
                allowed: format!("{MIN_POLL_INTERVAL:?}..={MAX_POLL_INTERVAL:?}"),
                got: format!("{:?}", self.poll_interval),
            });
        }
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
