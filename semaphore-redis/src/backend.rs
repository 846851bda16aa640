//! [`RedisStore`]: one Redis server, or a Redis Cluster, shared by
//! processes on many machines: its parts and how a call runs. Connecting
//! is in `connect`.

use std::sync::Arc;

use redis::Value;
use semaphore_core::store::{Changes, DecidingClock, WAITER_TTL_MS};
use semaphore_core::{Error, PoolId, Result, Session};

use crate::cluster::Listener;
use crate::error::storage;
use crate::link::Link;
use crate::scripts::{self, Common, Kind};
use crate::session::Beats;
use crate::slots::Place;
use crate::subscribe::Subscriber;
use crate::{Connection, keys, slots};

/// A [`Store`](semaphore_core::store::Store) on one Redis server (7.0 or
/// later), shared by any number of processes on any number of machines.
///
/// - **One round trip per primitive**: each is one `FCALL` of one of the
///   two functions of the store's Lua library (Redis 7 Functions; loaded at
///   connect, and again by a call that finds it missing), atomic on the
///   server. The server's user needs `FUNCTION LOAD` and `FCALL`
///   (`@scripting`).
/// - **The server's clock decides** (rule "Time"): the scripts read `TIME`,
///   so clients whose clocks disagree can neither over-issue nor take a
///   live lease. [`Store::clock`](semaphore_core::store::Store::clock) is
///   this process's view of the server's clock, refreshed every minute.
/// - **One server or a Redis Cluster**: [`connect`](RedisStore::connect)
///   takes one server (or a proxy in front of one),
///   [`connect_cluster`](RedisStore::connect_cluster) a cluster. Every key
///   of a pool is `PREFIX:{<pool id>}:...`, so a pool lives in one hash
///   slot, and each primitive runs on its pool's slot alone; see
///   [`connect_cluster`](RedisStore::connect_cluster) for what differs.
/// - **Wake-up:** one pub/sub connection per store on `PREFIX:wake`, fanned
///   out to this process's waiters; a fallback poll covers lost messages.
/// - **Fair across machines:** the heads of each process's queue are
///   queued per pool with a heartbeat; a head whose process stopped asking
///   for 4.5 s stops blocking others.
/// - **A handed slot is held on arrival** (one server): a return hands
///   its slot to the first queued head in its own script and publishes
///   the lease on the head's store's channel; a bound borrower holds it
///   from the message's arrival, with no call of its own, and its store
///   confirms it in the background. Until the confirmation lands, the
///   lease's session vouches for at most 200 ms after the hand-off
///   ([`Limits::handed_bound`](semaphore_core::Limits::handed_bound)),
///   the longest the server keeps a handed lease whose head's connection
///   is gone.
/// - **Tokens** are the server's clock in µs, or one more than the pool's
///   last token if larger: they grow across a delete and across a restart
///   that lost every key, as long as the server's clock does not step
///   back.
/// - **A restart that lost the data**: see
///   [`RedisOptions::restart_grace`](crate::RedisOptions::restart_grace). The server must not evict the
///   store's keys (`maxmemory-policy noeviction`, Redis's default): an
///   evicted lease is a lease handed out twice. Out of memory, borrows
///   fail with a non-retryable [`Error::Storage`] and nothing is written;
///   returns, renewals and deletes still work.
/// - **Errors**: a refused, dropped or timed-out connection and the
///   server's transient states are retryable [`Error::Storage`]; a lost
///   connection is never [`Error::Exhausted`].
///
/// Needs a tokio runtime: a call made outside one fails with
/// [`Error::NoRuntime`].
///
/// ```no_run
/// use std::{sync::Arc, time::Duration};
/// use semaphore_redis::{Pool, PoolId, RedisStore};
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), semaphore_redis::Error> {
/// let store = Arc::new(RedisStore::connect("redis://cache.internal/").await?);
/// let pool = Pool::new(store, PoolId::from_name("exports"));
/// pool.register(3).await?; // idempotent: every machine may call it
/// let lease = pool.borrow(Duration::from_secs(600), Duration::from_secs(30)).await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct RedisStore {
    pub(crate) connection: Connection,
    pub(crate) prefix: String,
    pub(crate) changes: Arc<Changes>,
    pub(crate) time: DecidingClock,
    pub(crate) restart_grace_ms: u64,
    /// The connection that marks this process's queued heads as alive
    /// (a waiter's place is bound to a connection); none on
    /// a cluster.
    pub(crate) link: Option<Link>,
    /// The session this store's bound leases belong to.
    pub(crate) session: Session,
    /// Its heartbeat, which a bound borrow on a cluster slot joins first.
    pub(crate) beats: Arc<Beats>,
    pub(crate) wake: Wake,
    /// The process that connected it: a child forked from it is refused.
    pub(crate) process: semaphore_core::store::ForkCheck,
}

/// How the store's waiters learn of changes.
#[derive(Debug)]
pub(crate) enum Wake {
    /// One server's channel, `PREFIX:wake`, and the store's own,
    /// `PREFIX:wake:<own>`, where a return that hands a slot to one of
    /// its queued heads tells it (and no other process).
    Server {
        _subscriber: Subscriber,
        own: String,
    },
    /// A cluster's sharded channels, one per hash slot, and the ids of
    /// the store's links to the slots' masters (waiter liveness).
    Cluster(Listener, crate::cluster::Links),
}

impl RedisStore {
    /// The client id of the connection that marks this process's queued
    /// heads as alive, `None` while it is down, and always
    /// on a cluster.
    pub fn link_id(&self) -> Option<i64> {
        self.link.as_ref().and_then(Link::id)
    }

    /// The prefix of the store's keys.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// This process's view of the server's clock, which times its waits;
    /// `None` in test mode (a manual clock).
    pub fn server_clock(&self) -> Option<&semaphore_core::store::ServerClock> {
        self.time.server().map(|view| &**view)
    }

    /// The number of queued heads of `pool`: store handles (normally one
    /// per process) whose borrowers wait on it, on every machine, as the
    /// server records them.
    ///
    /// # Errors
    /// [`Error::Storage`] if the server failed.
    pub async fn queue_heads(&self, pool: PoolId) -> Result<u32> {
        let call = self.invocation(Kind::Shrink, "queue_heads", [pool]);
        let heads = crate::reply::int("queue_heads", &self.run("queue_heads", &call).await?)?;
        Ok(u32::try_from(heads).unwrap_or(u32::MAX))
    }

    /// The connection the store's scripts run on: cheap to clone,
    /// reconnects by itself.
    pub fn connection(&self) -> &Connection {
        &self.connection
    }

    /// Whether this store is on a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.connection.is_cluster()
    }

    /// The Redis Cluster hash slot of pool `pool`'s keys (0 to 16383):
    /// its id's, or, if the prefix carries a hash tag (`jobs{gpu}`), the
    /// tag's. Pools on one slot are borrowed together in one atomic script
    /// on a cluster.
    pub fn hash_slot(&self, pool: PoolId) -> u16 {
        slots::of_pool(&self.prefix, pool)
    }

    /// Where pool `pool`'s scripts find the session and run keys and the
    /// wake-up channel: the server's, or its hash slot's on a cluster.
    pub(crate) fn place(&self, pool: PoolId) -> Place {
        if self.is_cluster() {
            Place::slot(&self.prefix, self.hash_slot(pool))
        } else {
            Place::server(&self.prefix)
        }
    }

    /// An invocation of operation `op` on `pools`' keys, with the arguments
    /// every operation takes; the caller adds its own.
    pub(crate) fn invocation(
        &self,
        kind: Kind,
        op: &str,
        pools: impl IntoIterator<Item = PoolId>,
    ) -> scripts::Invocation {
        let pools: Vec<PoolId> = pools.into_iter().collect();
        let place = match pools.first() {
            Some(pool) => self.place(*pool),
            None => Place::server(&self.prefix),
        };
        let keys = pools
            .into_iter()
            .flat_map(|pool| keys::of(&self.prefix, pool));
        let common = Common {
            time: &self.time,
            waiter_ttl_ms: WAITER_TTL_MS,
            place: &place,
            grace_ms: self.restart_grace_ms,
        };
        scripts::invocation(kind, op, keys, &common)
    }

    /// Runs `invocation`: one round trip (two if the server lost the
    /// script).
    pub(crate) async fn run(
        &self,
        operation: &'static str,
        invocation: &scripts::Invocation,
    ) -> Result<Value> {
        self.process.check(operation)?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::NoRuntime { operation });
        }
        let mut connection = self.connection.clone();
        match invocation.invoke_async(&mut connection).await {
            // The connection was dropped under the call (a restart, a
            // `CLIENT KILL`, an idle timeout): the manager reconnects, and
            // the call is made once more. Every script is safe to repeat: a
            // borrow finds the lease its first try granted under the same
            // lease id, a return or renew of a lease already ended says so.
            Err(e) if e.is_connection_dropped() && !e.is_timeout() => {
                self.lost_a_connection();
                invocation
                    .invoke_async(&mut connection)
                    .await
                    .map_err(storage(operation))
            }
            // No connection to the node (a cluster's links all lost, say):
            // redis-rs connects again from the seed nodes, under new ids.
            Err(e) if e.kind() == redis::ErrorKind::ClusterConnectionNotFound => {
                self.lost_a_connection();
                Err(storage(operation)(e))
            }
            answer => answer.map_err(storage(operation)),
        }
    }
}

impl RedisStore {
    /// On a cluster, forgets the ids of the store's links: a lost
    /// connection comes back under another.
    fn lost_a_connection(&self) {
        if let Wake::Cluster(_, links) = &self.wake {
            links.forget();
        }
    }

    /// The suffix of this store's own channel (`PREFIX:wake:<own>`), where
    /// a return that hands one of its queued heads a slot tells it; `None`
    /// on a cluster, where the slot's channel tells every store.
    pub(crate) fn own_channel(&self) -> Option<&str> {
        match &self.wake {
            Wake::Server { own, .. } => Some(own),
            Wake::Cluster(..) => None,
        }
    }

    /// The client id that marks this process's queued heads on `pool` as
    /// alive: the link's on one server, the store's link to the master
    /// of the pool's slot on a cluster; `None` while unknown.
    pub(crate) fn waiter_link(&self, pool: PoolId) -> Option<i64> {
        match &self.wake {
            Wake::Server { .. } => self.link_id(),
            Wake::Cluster(_, links) => links.get(self.hash_slot(pool)),
        }
    }

    /// `ttl`, clamped to the restart grace ([`Store::max_ttl`]): the core
    /// clamps before it calls, and so does a caller of the store itself.
    ///
    /// [`Store::max_ttl`]: semaphore_core::store::Store::max_ttl
    pub(crate) fn within_grace(&self, ttl: std::time::Duration) -> std::time::Duration {
        use semaphore_core::store::Store;
        ttl.min(self.max_ttl())
    }
}
