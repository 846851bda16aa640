//! Line 23 of BENCHMARKS.md (Redis Cluster): borrow + return
//! pairs per second on a Redis Cluster (three masters, one replica each,
//! on loopback) against the same load on one Redis server (the same
//! binary, TCP loopback, no persistence), on one server with a replica
//! (as each master has) and on a cluster of one node (cluster mode alone),
//! in the same run, alternating, medians of [`ROUNDS`]:
//!
//! - **spread**: 48 pools (count 4), one task per pool, each pool's
//!   pairs on its own pool: the pools spread over the cluster's masters.
//! - **hot**: one pool (count 8), 16 tasks (goal: the cluster at 0.8x of
//!   one server or better).
//!
//! With each run's CPU (`INFO cpu` of every node, and this process's),
//! per pair: this machine has two cores, so the ratio says what a cluster
//! costs here, not how it scales. Writes
//! `target/semaphore-bench/line23.json` for `report`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use semaphore_benches::{cpu_ns, median, out_dir};
use semaphore_redis::testing::{TestCluster, TestServer};
use semaphore_redis::{Pool, PoolId, RedisOptions, RedisStore};

const TTL: Duration = Duration::from_secs(30);
const RUN: Duration = Duration::from_secs(2);
const ROUNDS: usize = 3;

/// Seconds of CPU the servers at `urls` have used (`used_cpu_sys` +
/// `used_cpu_user`): the masters' (and a lone server's), and the
/// replicas'.
async fn servers_cpu_s(urls: &[String]) -> (f64, f64) {
    let (mut masters, mut replicas) = (0.0, 0.0);
    for url in urls {
        let client = semaphore_redis::redis::Client::open(url.as_str()).expect("a node's URL");
        let mut connection = client
            .get_multiplexed_async_connection()
            .await
            .expect("a connection to a node");
        let info: String = semaphore_redis::redis::cmd("INFO")
            .arg("cpu")
            .arg("replication")
            .query_async(&mut connection)
            .await
            .expect("INFO cpu replication");
        let cpu = info
            .lines()
            .filter(|l| l.starts_with("used_cpu_sys:") || l.starts_with("used_cpu_user:"))
            .filter_map(|l| l.split(':').nth(1)?.trim().parse::<f64>().ok())
            .sum::<f64>();
        if info.contains("role:slave") {
            replicas += cpu;
        } else {
            masters += cpu;
        }
    }
    (masters, replicas)
}

/// One run: `tasks` tasks, task `i` on `pools[i % pools.len()]`, pairs
/// for [`RUN`]; pairs per second, and µs of CPU per pair of the masters
/// (or the lone server), of the replicas and of this process.
async fn run(pools: &[Pool], tasks: usize, urls: &[String]) -> [f64; 4] {
    let (servers_before, own_before) = (servers_cpu_s(urls).await, cpu_ns());
    let started = Instant::now();
    let workers: Vec<_> = (0..tasks)
        .map(|i| {
            let pool = pools[i % pools.len()].clone();
            tokio::spawn(async move {
                let mut pairs = 0u64;
                while started.elapsed() < RUN {
                    let lease = pool
                        .borrow(TTL, Duration::from_secs(10))
                        .await
                        .expect("borrow");
                    lease.release().await.expect("return");
                    pairs += 1;
                }
                pairs
            })
        })
        .collect();
    let mut pairs = 0u64;
    for worker in workers {
        pairs += worker.await.expect("a worker");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let servers = servers_cpu_s(urls).await;
    let own = (cpu_ns() - own_before) as f64 / 1e9;
    let n = pairs as f64;
    [
        n / elapsed,
        (servers.0 - servers_before.0) * 1e6 / n,
        (servers.1 - servers_before.1) * 1e6 / n,
        own * 1e6 / n,
    ]
}

/// `n` pools named `name-i` with count `count` on `store`.
async fn pools(store: &Arc<RedisStore>, name: &str, n: usize, count: u32) -> Vec<Pool> {
    let mut out = Vec::new();
    for i in 0..n {
        let pool = Pool::new(store.clone(), PoolId::from_name(&format!("{name}-{i}")));
        pool.register(count).await.expect("register");
        out.push(pool);
    }
    out
}

/// A free loopback port.
fn free_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if !semaphore_benches::selected("redis_cluster", &args) {
        return;
    }
    let cluster = TestCluster::start().expect("a Redis Cluster for the bench");
    let port = free_port().to_string();
    let _server = TestServer::start_with(&["--port", &port, "--bind", "127.0.0.1"])
        .expect("a Redis server for the bench");
    let server_urls = vec![format!("redis://127.0.0.1:{port}")];
    // One server with a replica, as each of the cluster's masters has.
    let (primary, replica) = (free_port().to_string(), free_port().to_string());
    let _primary = TestServer::start_with(&["--port", &primary, "--bind", "127.0.0.1"])
        .expect("a Redis server for the bench");
    let _replica = TestServer::start_with(&[
        "--port",
        &replica,
        "--bind",
        "127.0.0.1",
        "--replicaof",
        "127.0.0.1",
        &primary,
    ])
    .expect("a replica for the bench");
    let replicated_urls = vec![
        format!("redis://127.0.0.1:{primary}"),
        format!("redis://127.0.0.1:{replica}"),
    ];
    let cluster_urls = cluster.urls();
    let options = || RedisOptions::default().restart_grace(Duration::ZERO);
    let on_server = Arc::new(
        RedisStore::connect_with(&server_urls[0], options())
            .await
            .expect("a store on the server"),
    );
    // A cluster of one node that serves every slot, no replica: what
    // cluster mode costs the server and the client, alone.
    let single = free_port().to_string();
    let one_node = TestServer::start_with(&[
        "--port",
        &single,
        "--bind",
        "127.0.0.1",
        "--cluster-enabled",
        "yes",
    ])
    .expect("a cluster node for the bench");
    one_node.command("CLUSTER ADDSLOTSRANGE 0 16383");
    while !one_node
        .command("CLUSTER INFO")
        .contains("cluster_state:ok")
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let one_node_urls = vec![format!("redis://127.0.0.1:{single}")];
    let on_one_node = Arc::new(
        RedisStore::connect_cluster_with(&[one_node_urls[0].as_str()], options())
            .await
            .expect("a store on the one-node cluster"),
    );
    let on_replicated = Arc::new(
        RedisStore::connect_with(&replicated_urls[0], options())
            .await
            .expect("a store on the replicated server"),
    );
    let nodes: Vec<&str> = cluster_urls.iter().map(String::as_str).collect();
    let on_cluster = Arc::new(
        RedisStore::connect_cluster_with(&nodes, options())
            .await
            .expect("a store on the cluster"),
    );
    let mut out = serde_json::Map::new();
    for (shape, n, count, tasks) in [("spread", 48, 4, 48), ("hot", 1, 8, 16)] {
        let (server_pools, replicated_pools, one_node_pools, cluster_pools) = (
            pools(&on_server, shape, n, count).await,
            pools(&on_replicated, shape, n, count).await,
            pools(&on_one_node, shape, n, count).await,
            pools(&on_cluster, shape, n, count).await,
        );
        let masters: std::collections::BTreeSet<u16> = cluster_pools
            .iter()
            .map(|p| (on_cluster.hash_slot(p.id()) / 5461).min(2))
            .collect();
        let (mut server, mut replicated, mut one_node, mut clustered) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            server.push(run(&server_pools, tasks, &server_urls).await);
            replicated.push(run(&replicated_pools, tasks, &replicated_urls).await);
            one_node.push(run(&one_node_pools, tasks, &one_node_urls).await);
            clustered.push(run(&cluster_pools, tasks, &cluster_urls).await);
        }
        let figures = |runs: &[[f64; 4]]| {
            let of = |i: usize| median(runs.iter().map(|r| r[i]).collect());
            serde_json::json!({
                "pairs_per_s": of(0),
                "masters_cpu_us_per_pair": of(1),
                "replicas_cpu_us_per_pair": of(2),
                "client_cpu_us_per_pair": of(3),
                "runs_pairs_per_s": runs.iter().map(|r| r[0]).collect::<Vec<_>>(),
            })
        };
        let (server, replicated, one_node, clustered) = (
            figures(&server),
            figures(&replicated),
            figures(&one_node),
            figures(&clustered),
        );
        let ratio = clustered["pairs_per_s"].as_f64().unwrap_or(0.0)
            / server["pairs_per_s"].as_f64().unwrap_or(1.0);
        let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or(0.0);
        println!(
            "line 23 {shape}: one server with a replica {:.0} pairs/s ({:.2}x of one server), \
             CPU per pair {:.1} + replica {:.1} µs; client {:.1} µs",
            f(&replicated, "pairs_per_s"),
            f(&replicated, "pairs_per_s") / f(&server, "pairs_per_s"),
            f(&replicated, "masters_cpu_us_per_pair"),
            f(&replicated, "replicas_cpu_us_per_pair"),
            f(&replicated, "client_cpu_us_per_pair"),
        );
        println!(
            "line 23 {shape}: a one-node cluster {:.0} pairs/s ({:.2}x of one server), CPU per \
             pair {:.1} µs; client {:.1} µs",
            f(&one_node, "pairs_per_s"),
            f(&one_node, "pairs_per_s") / f(&server, "pairs_per_s"),
            f(&one_node, "masters_cpu_us_per_pair"),
            f(&one_node, "client_cpu_us_per_pair"),
        );
        println!(
            "line 23 {shape}: {n} pool(s), {tasks} tasks: one server {:.0} pairs/s, cluster {:.0} \
             pairs/s ({ratio:.2}x); CPU per pair, server {:.1} µs, cluster masters {:.1} + \
             replicas {:.1} µs; client {:.1} / {:.1} µs",
            f(&server, "pairs_per_s"),
            f(&clustered, "pairs_per_s"),
            f(&server, "masters_cpu_us_per_pair"),
            f(&clustered, "masters_cpu_us_per_pair"),
            f(&clustered, "replicas_cpu_us_per_pair"),
            f(&server, "client_cpu_us_per_pair"),
            f(&clustered, "client_cpu_us_per_pair"),
        );
        out.insert(
            shape.into(),
            serde_json::json!({
                "pools": n, "count": count, "tasks": tasks,
                "masters_used": masters.len(),
                "server": server, "replicated": replicated, "one_node": one_node,
                "cluster": clustered,
                "ratio": ratio,
            }),
        );
    }
    let path = out_dir(env!("CARGO_TARGET_TMPDIR")).join("line23.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&out).expect("json")).expect("line23.json");
    println!("wrote {}", path.display());
}
