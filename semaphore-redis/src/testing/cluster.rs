//! A throwaway Redis Cluster for tests: three masters with one replica
//! each, on loopback ports, made as an operator makes one
//! (`redis-server --cluster-enabled yes`, then `redis-cli --cluster
//! create`).

use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{INSTALL, ask, started, watchdog};

/// Masters, and replicas of each.
const MASTERS: usize = 3;
const REPLICAS: usize = 1;

/// A Redis Cluster of its own, on `127.0.0.1`: stopped and removed when
/// dropped (or, as a [`TestServer`](super::TestServer), by a watchdog once
/// the test process is gone).
///
/// ```no_run
/// use semaphore_redis::testing::TestCluster;
///
/// let cluster = TestCluster::start().unwrap();
/// println!("a node: {}", cluster.urls()[0]);
/// ```
#[derive(Debug)]
pub struct TestCluster {
    dir: tempfile::TempDir,
    nodes: Vec<(u16, Child)>,
}

impl TestCluster {
    /// Starts six nodes (three masters, one replica each), joins them into
    /// a cluster and waits until every node says `cluster_state:ok`.
    ///
    /// # Errors
    /// What to install, or what failed, in words (with the log to read).
    pub fn start() -> Result<TestCluster, String> {
        let dir = tempfile::Builder::new()
            .prefix("semaphore-redis-cluster-")
            .tempdir()
            .map_err(|e| format!("a temporary directory for Redis Cluster: {e}"))?;
        let mut cluster = TestCluster {
            nodes: Vec::new(),
            dir,
        };
        let dir = cluster.dir.path().to_path_buf();
        for port in ports(MASTERS * (1 + REPLICAS))? {
            let child = spawn(&dir, port)?;
            watchdog(&dir, child.id())?;
            cluster.nodes.push((port, child));
        }
        let addresses: Vec<String> = cluster
            .nodes
            .iter()
            .map(|(port, _)| format!("127.0.0.1:{port}"))
            .collect();
        let created = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", &REPLICAS.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => INSTALL.to_string(),
                _ => format!("running redis-cli --cluster create: {e}"),
            })?;
        if !created.status.success() {
            return Err(format!(
                "redis-cli --cluster create failed: {}",
                String::from_utf8_lossy(&created.stdout)
            ));
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        for (port, _) in &cluster.nodes {
            while !command(*port, "CLUSTER INFO").is_ok_and(|i| i.contains("cluster_state:ok")) {
                if Instant::now() > deadline {
                    return Err(format!(
                        "the cluster was not ok within 30 s; see {}",
                        dir.display()
                    ));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
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
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        for (_, child) in &mut self.nodes {
            let _ = child.kill();
            let _ = child.wait();
        }
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

/// Starts a cluster-enabled `redis-server` on `port`, its files in a
/// folder of `dir`, and waits until it answers `PING`.
fn spawn(dir: &Path, port: u16) -> Result<Child, String> {
    let home = dir.join(port.to_string());
    std::fs::create_dir_all(&home).map_err(|e| format!("a folder for node {port}: {e}"))?;
    let log = home.join("redis.log");
    let mut command = Command::new("redis-server");
    command
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"])
        .args(["--save", "", "--appendonly", "no", "--dir"])
        .arg(&home)
        .arg("--logfile")
        .arg(&log);
    started(command, &log, || self::command(port, "PING"))
}
