//! [`Connection`]: the connection a store's scripts run on, to one server
//! or to a Redis Cluster.

use std::fmt;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, RedisFuture, Value};

/// The connection a [`RedisStore`](crate::RedisStore)'s scripts run on:
/// cheap to clone, reconnects by itself, and implements redis-rs's
/// [`ConnectionLike`], so that any command can be sent on it
/// (`redis::cmd("INFO").query_async(&mut store.connection().clone())`).
///
/// - `Server`: one server, through redis-rs's
///   [`ConnectionManager`].
/// - `Cluster`: a Redis Cluster, through redis-rs's
///   [`ClusterConnection`], which sends each command to the master of its
///   key's hash slot, follows `MOVED` and `ASK`, and refreshes the slot map
///   when the topology changes (a failover, a resharding). A command
///   without a key goes where redis-rs routes it (`INFO`: every node).
#[derive(Clone)]
pub enum Connection {
    /// One server.
    Server(ConnectionManager),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Server(c) => f.debug_tuple("Server").field(c).finish(),
            Self::Cluster(_) => f.debug_tuple("Cluster").finish_non_exhaustive(),
        }
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Server(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Server(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Server(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}

impl Connection {
    /// Sends `cmd` to the server, or, on a cluster, to the master of hash
    /// slot `slot` (one that has no key, such as `CLIENT LIST` or `WAIT`,
    /// which names a node by the slot it serves).
    pub(crate) async fn on_slot(&self, cmd: Cmd, slot: u16) -> redis::RedisResult<Value> {
        match self {
            Self::Server(c) => cmd.query_async(&mut c.clone()).await,
            Self::Cluster(c) => {
                let route = Route::new(slot, SlotAddr::Master);
                c.clone()
                    .route_command(
                        cmd,
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
                    )
                    .await
            }
        }
    }

    /// Whether this is a cluster connection.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }
}
