//! A throwaway Redis Cluster for tests: three masters with one replica
//! each, on loopback ports, made as an operator makes one
//! (`redis-server --cluster-enabled yes`, then `redis-cli --cluster
//! create`). Each node is a throwaway [`TestServer`] of its own, started
//! with the cluster's arguments.

use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use semaphore_core::store::testing::{self as skeleton, Engine};

use super::{INSTALL, TestServer, ask};

/// Masters, and replicas of each.
const MASTERS: usize = 3;
const REPLICAS: usize = 1;

/// A Redis Cluster of its own, on `127.0.0.1`: stopped and removed when
/// dropped (or, as each node is a [`TestServer`], by a watchdog once the
/// test process is gone).
///
/// ```no_run
/// use semaphore_redis::testing::TestCluster;
///
/// let cluster = TestCluster::start().unwrap();
/// println!("a node: {}", cluster.urls()[0]);
/// ```
#[derive(Debug)]
pub struct TestCluster {
    /// Each node's port and server, in the order given to `redis-cli`.
    nodes: Vec<(u16, TestServer)>,
}

impl TestCluster {
    /// The cluster this test process shares between its tests, started on
    /// first use; `SEMAPHORE_REDIS_CLUSTER_URLS` (comma-separated) names
    /// one of the caller's instead. Give each test its own prefix
    /// ([`TestServer::fresh_prefix`](super::TestServer::fresh_prefix)).
    ///
    /// # Panics
    /// If `redis-server` or `redis-cli` is missing or the cluster does not
    /// form, with what to install or what failed.
    pub fn shared() -> &'static [String] {
        static SHARED: OnceLock<(Option<TestCluster>, Vec<String>)> = OnceLock::new();
        let (_, urls) =
            SHARED.get_or_init(|| match std::env::var("SEMAPHORE_REDIS_CLUSTER_URLS") {
                Ok(urls) if !urls.is_empty() => {
                    (None, urls.split(',').map(str::to_string).collect())
                }
                _ => {
                    let cluster = Self::start().unwrap_or_else(|e| panic!("{e}"));
                    let urls = cluster.urls();
                    (Some(cluster), urls)
                }
            });
        urls
    }

    /// Starts six nodes (three masters, one replica each), joins them into
    /// a cluster and waits until every node says `cluster_state:ok` and
    /// every replica is in sync. Tried up to five times on fresh ports: a
    /// port found free may be taken (by another program's outgoing
    /// connection) before its node binds it.
    ///
    /// # Errors
    /// What to install, or what failed the last time, in words (with the
    /// log to read).
    pub fn start() -> Result<TestCluster, String> {
        let mut failed = String::new();
        for _ in 0..5 {
            match Self::start_once() {
                Ok(cluster) => return Ok(cluster),
                Err(e) if e == INSTALL => return Err(e),
                Err(e) => failed = e,
            }
        }
        Err(failed)
    }

    fn start_once() -> Result<TestCluster, String> {
        let mut cluster = TestCluster { nodes: Vec::new() };
        for port in ports(MASTERS * (1 + REPLICAS))? {
            let node = TestServer::start_with(&[
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--cluster-enabled",
                "yes",
                "--cluster-node-timeout",
                "2000",
            ])?;
            cluster.nodes.push((port, node));
        }
        let addresses: Vec<String> = cluster
            .nodes
            .iter()
            .map(|(port, _)| format!("127.0.0.1:{port}"))
            .collect();
        skeleton::run(
            Command::new("redis-cli")
                .arg("--cluster")
                .arg("create")
                .args(&addresses)
                .args(["--cluster-replicas", &REPLICAS.to_string(), "--cluster-yes"]),
            INSTALL,
        )?;
        let deadline = Instant::now() + Duration::from_secs(30);
        for (port, _) in &cluster.nodes {
            while !command(*port, "CLUSTER INFO").is_ok_and(|i| i.contains("cluster_state:ok")) {
                if Instant::now() > deadline {
                    return Err(format!(
                        "the cluster was not ok within 30 s; see {}",
                        cluster.logs()
                    ));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        // Replicas join a moment after the slots are served: wait until
        // every one follows its master and is in sync.
        let replicas = MASTERS * REPLICAS;
        let first = cluster.nodes[0].0;
        while command(first, "CLUSTER NODES").map_or(0, |n| n.matches(" slave ").count()) < replicas
            || cluster.nodes.iter().any(|(port, _)| {
                command(*port, "INFO replication")
                    .is_ok_and(|i| i.contains("role:slave") && !i.contains("master_link_status:up"))
            })
        {
            if Instant::now() > deadline {
                return Err(format!(
                    "the replicas were not in sync within 30 s; see {}",
                    cluster.logs()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(cluster)
    }

    /// Every node's URL (`redis://127.0.0.1:PORT`), the masters' first as
    /// `redis-cli` chose them at the start (a failover may change that).
    pub fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|(port, _)| format!("redis://127.0.0.1:{port}"))
            .collect()
    }

    /// The nodes' log files, for an error message.
    fn logs(&self) -> String {
        let logs: Vec<String> = self
            .nodes
            .iter()
            .filter_map(|(_, node)| node.owned.as_ref())
            .map(|node| node.dir().join(super::Redis::LOG).display().to_string())
            .collect();
        logs.join(", ")
    }
}

impl TestCluster {
    /// The ports of the master that serves `key`'s hash slot now and of
    /// its replica, as the node at the first port sees them.
    ///
    /// # Errors
    /// What failed, in words.
    pub fn serving(&self, key: &str) -> Result<(u16, u16), String> {
        let first = self.nodes[0].0;
        let slot: u16 = command(first, &format!("CLUSTER KEYSLOT {key}"))
            .map_err(|e| format!("CLUSTER KEYSLOT: {e}"))?
            .trim_start_matches(':')
            .trim()
            .parse()
            .map_err(|e| format!("CLUSTER KEYSLOT's answer: {e}"))?;
        let nodes = command(first, "CLUSTER NODES").map_err(|e| format!("CLUSTER NODES: {e}"))?;
        let lines: Vec<Vec<&str>> = nodes.lines().map(|l| l.split(' ').collect()).collect();
        let port =
            |address: &str| -> Option<u16> { address.split([':', '@']).nth(1)?.parse().ok() };
        let master = lines
            .iter()
            .find(|f| {
                f.len() > 8
                    && f[2].contains("master")
                    && f[8..].iter().any(|range| {
                        let mut ends = range.split('-').map(|n| n.parse::<u16>().ok());
                        match (ends.next().flatten(), ends.next().flatten()) {
                            (Some(a), Some(b)) => (a..=b).contains(&slot),
                            (Some(a), None) => a == slot,
                            _ => false,
                        }
                    })
            })
            .ok_or(format!("no master serves slot {slot}: {nodes}"))?;
        let replica = lines
            .iter()
            .find(|f| f.len() > 3 && f[3] == master[0])
            .ok_or(format!("the master of slot {slot} has no replica: {nodes}"))?;
        match (port(master[1]), port(replica[1])) {
            (Some(m), Some(r)) => Ok((m, r)),
            _ => Err(format!("addresses that do not parse: {nodes}")),
        }
    }

    /// Sends signal `signal` (`STOP`, `CONT`, `KILL`) to the node on `port`.
    ///
    /// # Panics
    /// If no node of the cluster is on `port`, or `kill` fails.
    pub fn signal(&self, port: u16, signal: &str) {
        let pid = self
            .nodes
            .iter()
            .find(|(p, _)| *p == port)
            .and_then(|(_, node)| node.owned.as_ref())
            .unwrap_or_else(|| panic!("no node on port {port}"))
            .pid();
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{signal} {pid}");
    }

    /// Sends one inline command (`CLIENT KILL TYPE replica`) to the node
    /// on `port`; its reply's first bytes, or the error in words.
    pub fn command(&self, port: u16, words: &str) -> String {
        command(port, words).unwrap_or_else(|e| format!("-{e}"))
    }

    /// Whether the node on `port` is a master now.
    pub fn is_master(&self, port: u16) -> bool {
        command(port, "ROLE").is_ok_and(|role| role.contains("master"))
    }
}

/// One inline command to the node on `port`; the first reply's bytes.
fn command(port: u16, words: &str) -> std::io::Result<String> {
    let stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    ask(stream, words)
}

/// `n` loopback ports that are free, each with its cluster bus port (ten
/// thousand above) free too.
fn ports(n: usize) -> Result<Vec<u16>, String> {
    let mut found = Vec::new();
    for _ in 0..1000 {
        if found.len() == n {
            return Ok(found);
        }
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .map_err(|e| format!("a free loopback port: {e}"))?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        let bus_free = port
            .checked_add(10000)
            .is_some_and(|bus| TcpListener::bind(("127.0.0.1", bus)).is_ok());
        if bus_free && !found.contains(&port) {
            found.push(port);
        }
    }
    Err(format!("no {n} free loopback ports with their bus ports"))
}
