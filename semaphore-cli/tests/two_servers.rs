//! Two `semaphore serve` processes on one PostgreSQL database, one Redis
//! server, one Redis Cluster or one MySQL database, serve the same pools and never over-issue.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Server, pool_id};
use semaphore_postgres::testing::TestServer;
use semaphore_redis::testing::{TestCluster, TestServer as RedisServer};
use serde_json::json;

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_one_database_never_over_issue() {
    let (pg, schema) = (TestServer::shared(), TestServer::fresh_schema());
    two_servers_never_over_issue(&["--postgres", pg.url(), "--postgres-schema", &schema]).await;
}

/// The same with the PostgreSQL store's statements prepared
/// (`--postgres-prepared-statements`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_with_prepared_statements_never_over_issue() {
    let (pg, schema) = (TestServer::shared(), TestServer::fresh_schema());
    two_servers_never_over_issue(&[
        "--postgres",
        pg.url(),
        "--postgres-schema",
        &schema,
        "--postgres-prepared-statements",
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_one_redis_never_over_issue() {
    let (redis, prefix) = (RedisServer::shared(), RedisServer::fresh_prefix());
    let args = ["--redis", redis.url(), "--redis-prefix", &prefix];
    two_servers_never_over_issue(&[&args[..], &["--redis-restart-grace", "0s"]].concat()).await;
}

/// The same on a Redis Cluster (`--redis-cluster`), the pools on its
/// three masters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_one_redis_cluster_never_over_issue() {
    let (urls, prefix) = (TestCluster::shared().join(","), RedisServer::fresh_prefix());
    let args = [
        "--redis-cluster",
        &urls,
        "--redis-prefix",
        &prefix,
        "--redis-restart-grace",
        "0s",
    ];
    two_servers_never_over_issue(&args).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_one_mysql_database_never_over_issue() {
    let (mysql, prefix) = (
        semaphore_mysql::testing::TestServer::shared(),
        semaphore_mysql::testing::TestServer::fresh_prefix(),
    );
    two_servers_never_over_issue(&["--mysql", mysql.url(), "--mysql-prefix", &prefix]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_one_etcd_cluster_never_over_issue() {
    use semaphore_etcd::testing::TestCluster;
    let (urls, prefix) = (
        TestCluster::shared().endpoints().join(","),
        TestCluster::fresh_prefix(),
    );
    two_servers_never_over_issue(&["--etcd", &urls, "--etcd-prefix", &prefix]).await;
}

/// 16 clients, alternating between two servers started with `args`.
async fn two_servers_never_over_issue(args: &[&str]) {
    let servers = [Server::start(args), Server::start(args)];
    let id = pool_id();
    servers[0]
        .call("PUT", &format!("/l/{id}"), Some(json!({"count": 3})))
        .await;

    // 16 clients, alternating servers, each 15 times: borrow (waiting),
    // hold 2 ms, return; every hold is logged.
    let mut clients = Vec::new();
    for c in 0..16 {
        let (http, base) = (servers[c % 2].http.clone(), servers[c % 2].base.clone());
        let id = id.clone();
        clients.push(tokio::spawn(async move {
            let mut holds = Vec::new();
            for _ in 0..15 {
                let granted: serde_json::Value = http
                    .post(format!("{base}/l/{id}/borrow"))
                    .json(&json!({"ttl": 60, "wait": 30}))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                let start = now_us();
                tokio::time::sleep(Duration::from_millis(2)).await;
                let end = now_us();
                let lease = granted["lease"].as_str().expect("granted").to_string();
                http.post(format!("{base}/l/{id}/return"))
                    .json(&json!({"lease": lease}))
                    .send()
                    .await
                    .unwrap();
                let position = granted["position"].as_u64().unwrap();
                holds.push((position, granted["token"].as_u64().unwrap(), start, end));
            }
            holds
        }));
    }
    let mut holds = Vec::new();
    for client in clients {
        holds.extend(client.await.unwrap());
    }
    assert_eq!(holds.len(), 16 * 15);
    let mut tokens: Vec<u64> = holds.iter().map(|h| h.1).collect();
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), holds.len(), "a token was granted twice");
    // No two holds of one position overlap, so never more than 3 at once.
    for a in &holds {
        assert!(a.0 < 3, "position {} of 3 slots", a.0);
        for b in &holds {
            let overlap = a.2 < b.3 && b.2 < a.3;
            assert!(
                a.1 == b.1 || a.0 != b.0 || !overlap,
                "position {} held twice at once: {a:?} {b:?}",
                a.0
            );
        }
    }
    let (_, state) = servers[1].call("GET", &format!("/l/{id}"), None).await;
    assert_eq!(state["in_use"], 0);
}
