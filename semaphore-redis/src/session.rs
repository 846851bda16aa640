//! The store handle's session: a key of its own,
//! `PREFIX:s:<session id>`, whose value is the session's end on the
//! server's clock, heartbeated on a connection of its own.
//!
//! On a cluster a script may touch its own hash slot only, so the session
//! keeps one such key in each slot where it may hold bound leases
//! (`PREFIX:{<slot's tag>}:s:<id>`): a home slot's from the start, and a
//! slot's before the session's first bound borrow there (it
//! [`join`](Beats::join)s it). A heartbeat renews them all at once (one
//! call per slot, in flight together) and lands only if every one did; one
//! that has ended, or that a failover lost, ends the session on every slot
//! at once, as on one server.
//!
//! The heartbeat's connection is made again whenever a beat fails or is
//! dropped midway (a stalled connection is not reused), so that a
//! partition that heals within the session timeout loses nothing.

use std::collections::BTreeSet;
use std::fmt;
use std::time::{Duration, SystemTime};

use semaphore_core::store::{DecidingClock, Heartbeat, async_trait, from_unix_ms, millis};
use semaphore_core::{Result, SessionId};

use crate::error::storage;
use crate::scripts::{self, Common, Kind};
use crate::slots::Place;

const OPERATION: &str = "session";

/// What a store connects with: one server's client, or a cluster's.
#[derive(Clone)]
pub(crate) enum Client {
    Server(redis::Client),
    Cluster(Box<redis::cluster::ClusterClient>),
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Server(c) => f.debug_tuple("Server").field(c).finish(),
            Self::Cluster(_) => f.debug_tuple("Cluster").finish_non_exhaustive(),
        }
    }
}

impl Client {
    /// A new connection of the client's kind, which does not reconnect by
    /// itself.
    async fn connect(&self) -> redis::RedisResult<Line> {
        Ok(match self {
            Self::Server(c) => Line::Server(c.get_multiplexed_async_connection().await?),
            Self::Cluster(c) => Line::Cluster(c.get_async_connection().await?),
        })
    }
}

/// The heartbeat's connection (cheap to clone: multiplexed).
#[derive(Clone)]
enum Line {
    Server(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl fmt::Debug for Line {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Server(_) => "Server",
            Self::Cluster(_) => "Cluster",
        })
    }
}

impl Line {
    async fn invoke(
        &mut self,
        invocation: &crate::scripts::Invocation,
    ) -> redis::RedisResult<redis::Value> {
        match self {
            Self::Server(c) => invocation.invoke_async(c).await,
            Self::Cluster(c) => invocation.invoke_async(c).await,
        }
    }
}

/// The Redis half of a [`Session`](semaphore_core::Session).
#[derive(Debug)]
pub(crate) struct Beats {
    pub(crate) client: Client,
    pub(crate) prefix: String,
    pub(crate) time: DecidingClock,
    /// The session timeout, for a slot joined between heartbeats.
    pub(crate) timeout: Duration,
    /// The connection, while its last call went through.
    connection: tokio::sync::Mutex<Option<Line>>,
    /// On a cluster, the hash slots whose key this session keeps; `None`
    /// on one server.
    pub(crate) slots: Option<std::sync::Mutex<BTreeSet<u16>>>,
}

impl Beats {
    /// The session's heartbeat on one server, or on a cluster (its home
    /// slot is `home`'s).
    pub(crate) fn new(
        client: Client,
        prefix: String,
        time: DecidingClock,
        timeout: Duration,
        home: Option<u16>,
    ) -> Self {
        Self {
            client,
            prefix,
            time,
            timeout,
            connection: tokio::sync::Mutex::new(None),
            slots: home.map(|slot| std::sync::Mutex::new(BTreeSet::from([slot]))),
        }
    }

    /// Where the session keeps its end: one place on one server, one per
    /// joined slot on a cluster.
    fn places(&self) -> Vec<Place> {
        match &self.slots {
            None => vec![Place::server(&self.prefix)],
            Some(slots) => slots
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .iter()
                .map(|slot| Place::slot(&self.prefix, *slot))
                .collect(),
        }
    }

    /// Runs operation `op` of the script on session `id`'s key at each of
    /// `places` with `args`, connecting first if needed; the connection is
    /// kept only if every call went through. The answers, in order.
    async fn call(
        &self,
        op: &str,
        id: SessionId,
        places: &[Place],
        args: &[String],
    ) -> Result<Vec<redis::Value>> {
        let mut kept = self.connection.lock().await;
        let connection = match kept.take() {
            Some(connection) => connection,
            None => self.client.connect().await.map_err(storage(OPERATION))?,
        };
        // One call per place, all at once: each on its slot's master (the
        // cluster connection multiplexes them), so that a heartbeat over
        // many slots costs about one round trip.
        let calls = places.iter().map(|place| {
            let common = Common {
                time: &self.time,
                waiter_ttl_ms: 0,
                place,
                grace_ms: 0,
            };
            let key = format!("{}:s:{}", place.prefix, id.as_uuid());
            let mut invocation = scripts::invocation(Kind::Shrink, op, [key], &common);
            for arg in args {
                invocation.arg(arg);
            }
            let mut connection = connection.clone();
            async move { connection.invoke(&invocation).await }
        });
        let values = futures_util::future::join_all(calls)
            .await
            .into_iter()
            .collect::<redis::RedisResult<Vec<_>>>()
            .map_err(storage(OPERATION))?;
        *kept = Some(connection);
        Ok(values)
    }

    /// On a cluster, makes sure that session `id` keeps its end in hash
    /// slot `slot` before a lease bound to it is borrowed there: the
    /// first time, creates the slot's key (the session lives: the core
    /// binds no lease to a session it does not hold open). `false` if the
    /// slot's key says the session has ended. On one server, `true`.
    ///
    /// # Errors
    /// [`Error::Storage`](semaphore_core::Error::Storage) if the server
    /// failed.
    pub(crate) async fn join(&self, id: SessionId, slot: u16) -> Result<bool> {
        let Some(slots) = &self.slots else {
            return Ok(true);
        };
        let joined = |slots: &std::sync::Mutex<BTreeSet<u16>>| {
            slots
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .contains(&slot)
        };
        if joined(slots) {
            return Ok(true);
        }
        let args = [millis(self.timeout).to_string(), "1".to_string()];
        let place = Place::slot(&self.prefix, slot);
        let values = self.call("beat", id, &[place], &args).await?;
        if !matches!(values.first(), Some(redis::Value::Int(_))) {
            return Ok(false);
        }
        slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(slot);
        Ok(true)
    }
}

#[async_trait]
impl Heartbeat for Beats {
    async fn beat(
        &self,
        id: SessionId,
        timeout: Duration,
        open: bool,
    ) -> Result<Option<SystemTime>> {
        let args = [
            millis(timeout).to_string(),
            if open { "1" } else { "0" }.to_string(),
        ];
        let places = self.places();
        let mut now = None;
        for value in self.call("beat", id, &places, &args).await? {
            match value {
                redis::Value::Int(at) => now = now.or(Some(at)),
                _ => {
                    // Ended on one slot (on a cluster, a failover may lose
                    // its key): ended everywhere at once, not at the end
                    // this beat just gave the other slots.
                    if places.len() > 1 {
                        let _ = self.call("close", id, &places, &[]).await;
                    }
                    return Ok(None);
                }
            }
        }
        Ok(now.map(|at| from_unix_ms(u64::try_from(at).unwrap_or(0))))
    }

    async fn close(&self, id: SessionId) -> Result<()> {
        self.call("close", id, &self.places(), &[]).await.map(drop)
    }
}
