//! A cluster's side of the server faults: its nodes, its pool's shard (a
//! Redis Cluster's; every member of an etcd cluster), a failover.

use std::sync::Arc;
use std::time::Duration;

use semaphore_redis::testing::TestCluster;

use super::Server;

impl Server {
    /// A cluster: the ports of the nodes that serve the pool: a Redis
    /// Cluster's shard (see [`Server::RedisCluster`]), once the pool is
    /// registered; every member of an etcd cluster of more than one.
    pub fn pool_shard(&self) -> Option<Vec<u16>> {
        match self {
            Server::RedisCluster { shard, .. } => shard.get().map(|pair| pair.to_vec()),
            Server::Etcd { ports, .. } if ports.len() > 1 => Some(ports.clone()),
            _ => None,
        }
    }

    /// A cluster: sends `signal` (`STOP`, `CONT`) to the node on `port`.
    pub(crate) fn signal_node(&self, port: u16, signal: &str) -> Result<String, String> {
        match self {
            Server::RedisCluster { cluster, .. } => {
                cluster.signal(port, signal);
                Ok(format!("SIG{signal} of node {port}"))
            }
            Server::Etcd { cluster, ports, .. } => {
                let member = ports
                    .iter()
                    .position(|p| *p == port)
                    .ok_or_else(|| format!("no member on port {port}"))?;
                cluster.signal(member, signal);
                Ok(format!("SIG{signal} of member {member} (port {port})"))
            }
            _ => Err("not a cluster".into()),
        }
    }

    /// An etcd cluster of three: stalls the proxy member `port`'s peers
    /// reach it through (`cut`: nothing it sends them arrives, nor what
    /// they send over connections they opened to it; what it asks of them
    /// over its own still does), or lets its bytes flow again. What was
    /// done, in words.
    pub(crate) fn partition_node(&self, port: u16, cut: bool) -> Result<String, String> {
        let Server::Etcd { ports, peers, .. } = self else {
            return Err("not an etcd cluster".into());
        };
        let member = ports
            .iter()
            .position(|p| *p == port)
            .ok_or_else(|| format!("no member on port {port}"))?;
        let proxy = peers
            .get(member)
            .ok_or_else(|| format!("member {member} has no peer proxy"))?;
        Ok(if cut {
            proxy.stall();
            format!("member {member} (port {port}) cut off from its peers")
        } else {
            proxy.heal();
            format!("member {member} (port {port}) heard by its peers again")
        })
    }

    /// A cluster: the master's port among `ports` now, if one is.
    pub(crate) fn master_among(&self, ports: &[u16]) -> Option<u16> {
        match self {
            Server::RedisCluster { cluster, .. } => {
                ports.iter().copied().find(|port| cluster.is_master(*port))
            }
            Server::Etcd {
                cluster,
                ports: all,
                ..
            } => {
                let leader = all.get(cluster.leader()?)?;
                ports.contains(leader).then_some(*leader)
            }
            _ => None,
        }
    }
}

/// `command` on every node of `cluster` (at `ports`), on tokio's blocking
/// pool: what each answered, or the first error.
pub(super) async fn on_every_node(
    cluster: &Arc<TestCluster>,
    ports: &[u16],
    command: &'static str,
) -> Result<String, String> {
    let (cluster, ports) = (cluster.clone(), ports.to_vec());
    let answers = tokio::task::spawn_blocking(move || {
        ports
            .iter()
            .map(|port| (*port, cluster.command(*port, command)))
            .collect::<Vec<_>>()
    })
    .await
    .map_err(|e| e.to_string())?;
    let mut said = Vec::new();
    for (port, answer) in answers {
        if answer.starts_with('-') {
            return Err(format!("{command} on node {port}: {}", answer.trim()));
        }
        said.push(format!("{port}: {}", answer.trim()));
    }
    Ok(format!("{command} on every node ({})", said.join(", ")))
}

/// Fails a master of `cluster` over to its replica: `CLUSTER FAILOVER
/// FORCE` on the replica at `pick` among the nodes at `ports` that are
/// replicas now (without the master's agreement, so that writes the
/// replica had not received are lost, as when a master dies), then waits
/// until it serves as a master and every node says the cluster is ok.
pub(super) fn fail_over(
    cluster: &TestCluster,
    ports: &[u16],
    pick: usize,
) -> Result<String, String> {
    let replicas: Vec<u16> = ports
        .iter()
        .copied()
        .filter(|port| !cluster.is_master(*port))
        .collect();
    let Some(&replica) = replicas.get(pick % replicas.len().max(1)) else {
        return Err("no replica to fail over to".into());
    };
    let answer = cluster.command(replica, "CLUSTER FAILOVER FORCE");
    if answer.starts_with('-') {
        return Err(format!(
            "CLUSTER FAILOVER FORCE on {replica}: {}",
            answer.trim()
        ));
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !cluster.is_master(replica)
        || ports.iter().any(|port| {
            !cluster
                .command(*port, "CLUSTER INFO")
                .contains("cluster_state:ok")
        })
    {
        if std::time::Instant::now() > deadline {
            return Err(format!(
                "replica {replica} was not a master of an ok cluster within 30 s"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(format!("CLUSTER FAILOVER FORCE on replica {replica}"))
}
