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
    pub(crate) node_addresses: Vec<(String, String)>,
    pub(crate) allow_eviction: bool,
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
            node_addresses: Vec::new(),
            allow_eviction: false,
        }
    }
}

impl RedisOptions {
    /// The prefix of every key and of the wake-up channel: keys are
    /// `PREFIX:{<pool id>}:...`. Default `semaphore`. 1 to 64 of `a-z`,
    /// `A-Z`, `0-9`, `_`, `-`, `.`, and at most one hash tag (`{`, one or
    /// more of those, `}`); anything else is refused at connect with
    /// [`Error::InvalidArgument`](semaphore_core::Error::InvalidArgument)
    /// naming `prefix`. Stores with different prefixes share nothing.
    ///
    /// **A shared hash slot** (Redis Cluster): a hash tag in the prefix
    /// (`jobs{gpu}`) puts every pool of the store on the tag's slot, so
    /// that a [`PoolSet`](semaphore_core::PoolSet) of them is one atomic
    /// script on one master; pools on different slots are borrowed
    /// together by a check-then-take protocol instead (see
    /// [`RedisStore::connect_cluster_with`](crate::RedisStore::connect_cluster_with)).
    /// Use one store with such a prefix for the pools that are borrowed
    /// together, and another for the rest, which spread over the masters.
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
    /// session timeout. It is the store's longest ttl
    /// ([`Store::max_ttl`](semaphore_core::store::Store::max_ttl)): a
    /// longer one is clamped to it, as any ttl above the limits is clamped,
    /// and the lease's expiry says what was granted; set it to the longest
    /// ttl your leases use.
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

    /// Whether to connect to a server with a memory limit (`maxmemory`
    /// set) whose `maxmemory-policy` may evict the store's keys (anything
    /// but `noeviction`). Default `false`: such a server is refused at
    /// connect with
    /// [`Error::InvalidArgument`](semaphore_core::Error::InvalidArgument)
    /// naming `url`.
    ///
    /// Why: an evicted lease frees its slot under a live holder, and under
    /// a `volatile-*` policy the session keys, the only keys of the store
    /// with a TTL, are the first to go, taking every lease bound to them.
    /// Set it only for a server whose memory never fills, and
    /// know that a full one can over-issue. A cluster is checked on every
    /// master.
    pub fn allow_eviction(mut self, allow: bool) -> Self {
        self.allow_eviction = allow;
        self
    }

    /// Redis Cluster: dials `dial` wherever a node announces `announced`
    /// (each a `host:port`; nodes announce themselves in `CLUSTER SLOTS`,
    /// `MOVED` and `ASK`). For nodes that announce addresses this process
    /// cannot reach as they are: a cluster behind NAT or in containers, or
    /// a proxy in front of each node. Each call adds one mapping; an
    /// address not mapped is dialled as announced. The slot map keeps the
    /// announced addresses, so redirections still find their node
    /// (redis-rs's `node_address_map`). [`connect_with`](crate::RedisStore::connect_with)
    /// ignores it; [`connect_cluster_with`](crate::RedisStore::connect_cluster_with)
    /// refuses one that does not parse with
    /// [`Error::InvalidArgument`](semaphore_core::Error::InvalidArgument)
    /// naming `node_address`.
    ///
    /// ```
    /// use semaphore_redis::RedisOptions;
    ///
    /// // The node announces 10.0.0.5:6379; from here it is a forwarded port.
    /// let options = RedisOptions::default().node_address("10.0.0.5:6379", "127.0.0.1:16379");
    /// ```
    pub fn node_address(mut self, announced: impl Into<String>, dial: impl Into<String>) -> Self {
        self.node_addresses.push((announced.into(), dial.into()));
        self
    }

    pub(crate) fn check(&self) -> Result<()> {
        semaphore_core::store::check_session_timeout(self.session_timeout)?;
        check_prefix("prefix", &self.prefix, 64, "-.{}")?;
        check_hash_tag(&self.prefix)?;
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

/// At most one hash tag in `prefix`: a `{`, then one or more characters,
/// then a `}`, and no brace besides.
///
/// # Errors
/// [`Error::InvalidArgument`] naming `prefix`.
fn check_hash_tag(prefix: &str) -> Result<()> {
    let opens = prefix.matches('{').count();
    let closes = prefix.matches('}').count();
    let well_formed = match (opens, closes, prefix.find('{'), prefix.find('}')) {
        (0, 0, ..) => true,
        (1, 1, Some(open), Some(close)) => close > open + 1,
        _ => false,
    };
    if well_formed {
        return Ok(());
    }
    Err(Error::InvalidArgument {
        field: "prefix",
        allowed: "at most one hash tag: `{`, one or more characters, `}` (jobs{gpu})".into(),
        got: format!("{prefix:?}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_may_carry_one_hash_tag() {
        for good in ["semaphore", "jobs{gpu}", "{a}", "x.{b-c}_d"] {
            assert!(
                RedisOptions::default().prefix(good).check().is_ok(),
                "{good}"
            );
        }
        for bad in ["{}", "a{", "a}", "}a{", "{a}{b}", "a{{b}}", "a b"] {
            match RedisOptions::default().prefix(bad).check() {
                Err(Error::InvalidArgument {
                    field: "prefix", ..
                }) => {}
                other => panic!("{bad}: {other:?}"),
            }
        }
    }
}
