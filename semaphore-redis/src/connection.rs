//! [`Connection`]: the connection a store's scripts run on, to one server
//! or to a Redis Cluster.

use std::fmt;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
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
    ///
    /// On a cluster, redis-rs sends a command without a key to the slot's
    /// master only while it is connected to it; else to another node (the
    /// master's replica, or any node), which would answer for itself: a
    /// `CLIENT LIST` of another node's clients would judge live waiters
    /// gone. So an `EXISTS` of a key on the slot goes first, in one
    /// pipeline: a node that does not serve the slot refuses it (`MOVED`),
    /// and the answer is then an error, never another node's.
    pub(crate) async fn on_slot(&self, cmd: Cmd, slot: u16) -> redis::RedisResult<Value> {
        match self {
            Self::Server(c) => cmd.query_async(&mut c.clone()).await,
            Self::Cluster(c) => {
                let mut pipe = redis::pipe();
                pipe.cmd("EXISTS")
                    .arg(crate::slots::prefix("semaphore-slot-check", slot));
                pipe.add_command(cmd);
                let route = SingleNodeRoutingInfo::SpecificNode(Route::new(slot, SlotAddr::Master));
                let mut answers = c.clone().route_pipeline(pipe, 0, 2, route).await?;
                if let Some(Value::ServerError(e)) = answers.first() {
                    return Err(e.clone().into());
                }
                match answers.pop() {
                    Some(Value::ServerError(e)) => Err(e.into()),
                    Some(answer) if answers.len() == 1 => Ok(answer),
                    _ => Err((redis::ErrorKind::UnexpectedReturnType, "no answer").into()),
                }
            }
        }
    }

    /// Whether this is a cluster connection.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }
}

#[cfg(all(test, feature = "test-util"))]
mod tests {
    use std::time::Duration;

    use redis::Value;
    use redis::cluster::ClusterClientBuilder;

    use super::Connection;
    use crate::testing::TestServer;

    fn client_id() -> redis::Cmd {
        let mut cmd = redis::cmd("CLIENT");
        cmd.arg("ID");
        cmd
    }

    fn free_port() -> String {
        std::net::TcpListener::bind(("127.0.0.1", 0))
            .and_then(|l| l.local_addr())
            .unwrap()
            .port()
            .to_string()
    }

    fn node(port: &str) -> TestServer {
        TestServer::start_with(&[
            "--port",
            port,
            "--bind",
            "127.0.0.1",
            "--cluster-enabled",
            "yes",
            "--cluster-node-timeout",
            "60000",
        ])
        .unwrap()
    }

    /// A command without a key for a slot's master while redis-rs has no
    /// connection to that master (it is gone): redis-rs hands it to another
    /// node, whose answer is refused, never taken for the master's. Two
    /// masters, each with half of the slots; the second shuts down.
    #[tokio::test]
    async fn another_nodes_answer_is_not_taken_for_the_masters() {
        let (a, b) = (free_port(), free_port());
        let (first, second) = (node(&a), node(&b));
        first.command("CLUSTER ADDSLOTSRANGE 0 8191");
        second.command("CLUSTER ADDSLOTSRANGE 8192 16383");
        first.command(&format!("CLUSTER MEET 127.0.0.1 {b}"));
        while [&first, &second]
            .iter()
            .any(|n| !n.command("CLUSTER INFO").contains("cluster_state:ok"))
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let client = ClusterClientBuilder::new([format!("redis://127.0.0.1:{a}")])
            .retries(1)
            .connection_timeout(Duration::from_millis(200))
            .response_timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        let connection = Connection::Cluster(client.get_async_connection().await.unwrap());
        let slot = 9000;
        let before = connection.on_slot(client_id(), slot).await;
        assert!(matches!(before, Ok(Value::Int(_))), "{before:?}");
        second.command("SHUTDOWN NOSAVE");
        for _ in 0..20 {
            let after = connection.on_slot(client_id(), slot).await;
            assert!(
                after.is_err(),
                "another node answered for the master: {after:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
