//! Connecting a [`RedisStore`]: to one server or to a Redis Cluster,
//! the checks at connect, and the store's parts started.

use std::sync::Arc;

use redis::FromRedisValue;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use semaphore_core::store::{Changes, millis};
use semaphore_core::{Error, PoolId, Result, Session};

use crate::backend::Wake;
use crate::cluster::Listener;
use crate::error::{malformed, storage};
use crate::link::Link;

use crate::session::{Beats, Client};
use crate::slots::Place;
use crate::subscribe;
use crate::{Connection, RedisOptions, RedisStore, slots};

impl RedisStore {
    /// Connects to the server at `url` with [`RedisOptions::default`].
    ///
    /// # Errors
    /// See [`connect_with`](RedisStore::connect_with).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, RedisOptions::default()).await
    }

    /// Connects to the server at `url` (`redis://[user:password@]host[:port][/db]`,
    /// `rediss://` is not built in, `redis+unix:///path/to/socket`), checks
    /// that it is Redis 7.0 or later, loads the scripts and starts the
    /// subscriber. It waits up to 2 s for the connection that holds the
    /// store's bound leases, so that the first borrow is bound; one
    /// that is not up by then (its leases are then left to their ttl until
    /// it is) fails nothing.
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] naming `url`, `prefix`,
    ///   `poll_interval` or `response_timeout`; naming `url` too if the
    ///   server is a Redis Cluster node (connect to a cluster with
    ///   [`connect_cluster`](RedisStore::connect_cluster)).
    /// - [`Error::NoRuntime`] outside a tokio runtime.
    /// - [`Error::Storage`] if the server cannot be reached (retryable),
    ///   refuses, or is older than 7.0 (not retryable).
    pub async fn connect_with(url: &str, options: RedisOptions) -> Result<Self> {
        options.check()?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::NoRuntime {
                operation: "connect",
            });
        }
        let client = redis::Client::open(url).map_err(|e| Error::InvalidArgument {
            field: "url",
            allowed: "a Redis URL (redis://host:port/db or redis+unix:///path)".into(),
            got: format!("one that does not parse: {e}"),
        })?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(options.response_timeout))
            .set_connection_timeout(Some(options.response_timeout))
            .set_number_of_retries(1);
        let connection = ConnectionManager::new_with_config(client.clone(), config)
            .await
            .map_err(storage("connect"))?;
        let mut connection = Connection::Server(connection);
        refuse_cluster(&connection).await?;
        Self::prepare(&mut connection, &options).await?;
        let changes = Arc::new(Changes::new());
        let ends = subscribe::Ends::default();
        let own = uuid::Uuid::new_v4().simple().to_string();
        let channel = Place::server(&options.prefix).channel;
        let subscriber = subscribe::spawn(subscribe::Setup {
            client: client.clone(),
            connection: connection.clone(),
            own_channel: format!("{channel}:{own}"),
            channel,
            changes: changes.clone(),
            ends: ends.clone(),
            poll: options.poll_interval,
            time: options.time.clone(),
            arrivals: crate::arrival::Arrivals {
                connection: connection.clone(),
                prefix: options.prefix.clone(),
                time: options.time.clone(),
            },
        });
        let link = Link::spawn(client.clone());
        let wake = Wake::Server {
            _subscriber: subscriber,
            own,
        };
        Self::start(
            connection,
            Client::Server(client),
            None,
            wake,
            changes,
            options,
        )
        .telling(&ends)
        .with_link(link)
        .with_session_up()
        .await
    }

    /// Connects to the Redis Cluster whose nodes (some or all) are at
    /// `urls` (`redis://[user:password@]host:port`) with
    /// [`RedisOptions::default`].
    ///
    /// # Errors
    /// See [`connect_cluster_with`](RedisStore::connect_cluster_with).
    pub async fn connect_cluster(urls: &[&str]) -> Result<Self> {
        Self::connect_cluster_with(urls, RedisOptions::default()).await
    }

    /// Connects to a Redis Cluster (7.0 or later) through redis-rs's
    /// cluster client, which learns the other nodes from those at `urls`,
    /// sends each primitive to the master of its pool's hash slot, follows
    /// `MOVED` and `ASK`, and refreshes its slot map when the topology
    /// changes. Then it checks the version, loads the scripts on every
    /// master and opens the session.
    ///
    /// What differs from one server (each script touches its pool's slot
    /// alone):
    /// - **Sessions** keep their end once per hash slot
    ///   where they hold bound leases, `PREFIX:{<slot's tag>}:s:<id>`; the
    ///   first bound borrow on a slot costs one more round trip, and each
    ///   heartbeat renews every such key.
    /// - **Wake-up** is per slot: the scripts `SPUBLISH` to the slot's
    ///   sharded channel, and the store `SSUBSCRIBE`s to it (one more round
    ///   trip, once per slot) before its first waiting borrow there.
    /// - **Failover is a restart** (rule "Restart grace, for every loss of
    ///   state"): a promoted replica has another run id, so the first grant
    ///   on each slot after it starts the grace; a slot whose run key a
    ///   promoted node lacks (lost with the newest writes, or never made)
    ///   starts it too. A `register` that first writes a slot's run key
    ///   waits (`WAIT`, up to 1 s) until a replica has it.
    /// - **Several pools** ([`PoolSet`](semaphore_core::PoolSet)) on one
    ///   hash slot are one script, all or nothing; on several slots, a
    ///   check-then-take protocol (each slot's pools checked without a
    ///   grant, then taken in order, and what was taken given back if a
    ///   later slot refuses in between). A hash tag in the prefix puts a
    ///   store's pools on one slot ([`RedisOptions::prefix`]).
    /// - **Waiters' places** name the store's own link to
    ///   the master of the pool's slot (its `CLIENT ID` there, learned once
    ///   per slot): a killed waiter holds back no one. After a failover or
    ///   a reconnect, places named by an old link are judged gone: their
    ///   waiters queue again at the back.
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] naming `urls` if there is none or one
    ///   does not parse; naming `prefix`, `poll_interval` or
    ///   `response_timeout` as [`connect_with`](RedisStore::connect_with).
    /// - [`Error::NoRuntime`] outside a tokio runtime.
    /// - [`Error::Storage`] if no node can be reached or the cluster
    ///   refuses (retryable), or a node is older than 7.0 (not retryable).
    pub async fn connect_cluster_with(urls: &[&str], options: RedisOptions) -> Result<Self> {
        options.check()?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::NoRuntime {
                operation: "connect",
            });
        }
        let urls: Vec<String> = urls.iter().map(|u| (*u).to_string()).collect();
        let client = crate::cluster::client(
            &urls,
            options.response_timeout,
            &options.node_addresses,
            None,
        )?;
        let connection = client
            .get_async_connection()
            .await
            .map_err(storage("connect"))?;
        let mut connection = Connection::Cluster(connection);
        Self::prepare(&mut connection, &options).await?;
        let changes = Arc::new(Changes::new());
        let ends = subscribe::Ends::default();
        let listener = Listener::start(
            &urls,
            &options,
            changes.clone(),
            ends.clone(),
            (connection.clone(), options.time.clone()),
        )
        .await?;
        let home = PoolId::from_uuid(uuid::Uuid::new_v4());
        let home = Some(slots::of_pool(&options.prefix, home));
        let wake = Wake::Cluster(listener, crate::cluster::Links::default());
        Self::start(
            connection,
            Client::Cluster(Box::new(client)),
            home,
            wake,
            changes,
            options,
        )
        .telling(&ends)
        .with_session_up()
        .await
    }

    /// Checks the version and the eviction policy, loads the scripts and
    /// reads the server's clock.
    async fn prepare(connection: &mut Connection, options: &RedisOptions) -> Result<()> {
        check_version(connection).await?;
        if !options.allow_eviction {
            refuse_eviction(connection).await?;
        }
        crate::scripts::load(connection)
            .await
            .map_err(storage("connect"))?;
        if !connection.is_cluster() {
            crate::list::index_existing(connection, &options.prefix)
                .await
                .map_err(storage("connect"))?;
        }
        if let Some(view) = options.time.server() {
            subscribe::measure(connection, view)
                .await
                .map_err(storage("connect"))?;
        }
        Ok(())
    }

    /// The store on `connection`, its session started (its home slot is
    /// `home` on a cluster).
    fn start(
        connection: Connection,
        client: Client,
        home: Option<u16>,
        wake: Wake,
        changes: Arc<Changes>,
        options: RedisOptions,
    ) -> Self {
        let timeout =
            semaphore_core::store::session_timeout(options.session_timeout, &options.time);
        let beats = Arc::new(Beats::new(
            client,
            options.prefix.clone(),
            options.time.clone(),
            timeout,
            home,
        ));
        let session = Session::start(beats.clone(), timeout, options.time.clone());
        Self {
            connection,
            prefix: options.prefix,
            changes,
            time: options.time,
            restart_grace_ms: grace_ms(options.restart_grace, timeout),
            link: None,
            session,
            beats,
            wake,
            process: semaphore_core::store::ForkCheck::here(),
        }
    }

    /// This store, its wake-up listener telling its session of the
    /// session ends the server reports.
    fn telling(self, ends: &subscribe::Ends) -> Self {
        let _ = ends.set(self.session.ends());
        self
    }

    fn with_link(mut self, link: Link) -> Self {
        self.link = Some(link);
        self
    }

    /// This store, once its session is open and the connection that marks
    /// its waiters alive is up, or after 2 s (bound borrows retry until the
    /// session opens); refused if the session cannot open at all.
    async fn with_session_up(self) -> Result<Self> {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), async {
            while self.link.as_ref().is_some_and(|l| l.id().is_none()) {
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
        })
        .await;
        self.session
            .open_within(std::time::Duration::from_secs(2))
            .await?;
        Ok(self)
    }
}

/// The restart grace in ms: the one set, but at least the session timeout
/// (so that a holder whose session a restart lost learns of it before the
/// grace ends), capped like a ttl so that the server's sums stay exact; 0
/// if it is off.
fn grace_ms(grace: std::time::Duration, session: std::time::Duration) -> u64 {
    if grace.is_zero() {
        return 0;
    }
    millis(grace.max(session)).unsigned_abs()
}

/// The server's `INFO` section `section` (on a cluster, a master's), read
/// at connect.
async fn info(connection: &Connection, section: &str) -> Result<String> {
    info_on(connection, section, 0).await
}

/// The `INFO` section `section` of the master of hash slot `slot` (of the
/// server, on one server).
async fn info_on(connection: &Connection, section: &str, slot: u16) -> Result<String> {
    let mut cmd = redis::cmd("INFO");
    cmd.arg(section);
    let value = connection
        .on_slot(cmd, slot)
        .await
        .map_err(storage("connect"))?;
    String::from_redis_value(value).map_err(|e| malformed("connect", &format!("INFO: {e}")))
}

/// Refuses a Redis Cluster node (`cluster_enabled:1`) to
/// [`RedisStore::connect`]: its scripts would read the session and run keys
/// outside their pool's hash slot, which a cluster refuses. Better at
/// connect, with what to do, than at the first borrow.
async fn refuse_cluster(connection: &Connection) -> Result<()> {
    let info = info(connection, "cluster").await?;
    if info.lines().any(|l| l.trim() == "cluster_enabled:1") {
        return Err(Error::InvalidArgument {
            field: "url",
            allowed: "a standalone Redis server; for a Redis Cluster, connect with \
                      RedisStore::connect_cluster (semaphore: --redis-cluster)"
                .into(),
            got: "a Redis Cluster node".into(),
        });
    }
    Ok(())
}

/// Refuses a server (on a cluster, any master) with a memory limit
/// (`maxmemory` set) whose `maxmemory-policy` may evict the store's keys:
/// see [`RedisOptions::allow_eviction`].
async fn refuse_eviction(connection: &Connection) -> Result<()> {
    for slot in master_slots(connection).await? {
        let info = info_on(connection, "memory", slot).await?;
        // No memory limit: nothing is ever evicted, whatever the policy.
        if info
            .lines()
            .find_map(|l| l.strip_prefix("maxmemory:"))
            .is_some_and(|limit| limit.trim() == "0")
        {
            continue;
        }
        let policy = info
            .lines()
            .find_map(|l| l.strip_prefix("maxmemory_policy:"))
            .map(str::trim)
            .ok_or_else(|| malformed("connect", "INFO memory without a maxmemory_policy"))?;
        if policy != "noeviction" {
            return Err(Error::InvalidArgument {
                field: "url",
                allowed: "a server whose maxmemory-policy is noeviction: any other may evict \
                          the store's keys and free live leases' slots (volatile-* policies \
                          evict exactly the session keys); set it with CONFIG SET \
                          maxmemory-policy noeviction, or opt in with \
                          RedisOptions::allow_eviction"
                    .into(),
                got: format!("maxmemory-policy {policy}"),
            });
        }
    }
    Ok(())
}

/// A hash slot of each master: slot 0 on one server; on a cluster, the
/// first slot of each master's ranges (`CLUSTER SLOTS`).
async fn master_slots(connection: &Connection) -> Result<Vec<u16>> {
    if !matches!(connection, Connection::Cluster(_)) {
        return Ok(vec![0]);
    }
    let value = connection
        .on_slot(redis::cmd("CLUSTER").arg("SLOTS").clone(), 0)
        .await
        .map_err(storage("connect"))?;
    let ranges: Vec<Vec<redis::Value>> = FromRedisValue::from_redis_value(value)
        .map_err(|e| malformed("connect", &format!("CLUSTER SLOTS: {e}")))?;
    let mut masters: Vec<(String, u16)> = Vec::new();
    for range in ranges {
        let start = range
            .first()
            .and_then(|v| u16::from_redis_value(v.clone()).ok());
        let master = range
            .get(2)
            .and_then(|v| Vec::<redis::Value>::from_redis_value(v.clone()).ok())
            .and_then(|node| node.get(2).cloned())
            .and_then(|id| String::from_redis_value(id).ok());
        if let (Some(start), Some(master)) = (start, master)
            && !masters.iter().any(|(m, _)| *m == master)
        {
            masters.push((master, start));
        }
    }
    if masters.is_empty() {
        return Err(malformed("connect", "CLUSTER SLOTS names no master"));
    }
    Ok(masters.into_iter().map(|(_, slot)| slot).collect())
}

/// Fails unless the server is Redis 7.0 or later (the scripts' flags).
async fn check_version(connection: &Connection) -> Result<()> {
    let info = info(connection, "server").await?;
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("")
        .trim()
        .to_string();
    let major: u32 = version
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .ok_or_else(|| malformed("connect", "INFO without a redis_version"))?;
    if major < 7 {
        return Err(Error::Storage {
            operation: "connect",
            retryable: false,
            source: format!("the server is Redis {version}; this store needs 7.0 or later").into(),
        });
    }
    Ok(())
}
