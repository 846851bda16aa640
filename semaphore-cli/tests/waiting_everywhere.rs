//! A pool's `waiting` over HTTP (its state and its `/leases` listing)
//! counts everyone known to wait for it, on every store: this server's
//! waiting borrows, every queued ticket, and, on a store shared by
//! servers, each other server whose borrowers queue there. (A pool with
//! tickets queued showed `waiting: 0`.)

mod common;

use common::{Server, pool_id};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tickets_and_borrows_count_as_waiting_memory() {
    counts(&["--memory"], false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tickets_and_borrows_count_as_waiting_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("waiting.db");
    counts(&["--sqlite", db.to_str().unwrap()], true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tickets_and_borrows_count_as_waiting_postgres() {
    use semaphore_postgres::testing::TestServer;
    let (pg, schema) = (TestServer::shared(), TestServer::fresh_schema());
    counts(
        &["--postgres", pg.url(), "--postgres-schema", &schema],
        true,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tickets_and_borrows_count_as_waiting_mysql() {
    use semaphore_mysql::testing::TestServer;
    let (mysql, prefix) = (TestServer::shared(), TestServer::fresh_prefix());
    counts(&["--mysql", mysql.url(), "--mysql-prefix", &prefix], true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tickets_and_borrows_count_as_waiting_etcd() {
    use semaphore_etcd::testing::TestCluster;
    let (urls, prefix) = (
        TestCluster::shared().endpoints().join(","),
        TestCluster::fresh_prefix(),
    );
    counts(&["--etcd", &urls, "--etcd-prefix", &prefix], true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tickets_and_borrows_count_as_waiting_redis() {
    use semaphore_redis::testing::TestServer;
    let (redis, prefix) = (TestServer::shared(), TestServer::fresh_prefix());
    // A fresh prefix is a server that may have restarted: no grace to
    // wait out before the first grant.
    let args = ["--redis", redis.url(), "--redis-prefix", &prefix];
    counts(
        &[&args[..], &["--redis-restart-grace", "0s"]].concat(),
        true,
    )
    .await;
}

/// One slot held, three tickets and a waiting borrow on server `a`; on a
/// `shared` store, a second server `b` with a waiting borrow of its own.
async fn counts(store: &[&str], shared: bool) {
    let a = Server::start(store);
    let id = pool_id();
    let pool = format!("/l/{id}");
    a.call("PUT", &pool, Some(json!({"count": 1}))).await;
    let (status, held) = a
        .call("POST", &format!("{pool}/borrow"), Some(json!({"ttl": 60})))
        .await;
    assert_eq!(status, 200, "{held}");
    for place in 1..=3 {
        let (status, queued) = a
            .call("POST", &format!("{pool}/enqueue"), Some(json!({"ttl": 60})))
            .await;
        assert_eq!((status, &queued["place"]), (202, &json!(place)), "{queued}");
    }
    let (_, state) = a.call("GET", &pool, None).await;
    assert_eq!(state["waiting"], 3, "the tickets: {state}");
    assert_eq!(a.waiting(&id).await, 3, "in /leases too");

    let here = borrow_later(&a, &pool);
    a.until_waiting(&id, 4).await;
    let (_, state) = a.call("GET", &pool, None).await;
    assert_eq!(state["waiting"], 4, "and the waiting borrow: {state}");

    if shared {
        // b sees a's tickets and a's queued borrower, and its own; a sees
        // b's once it queues in the store.
        let b = Server::start(store);
        let there = borrow_later(&b, &pool);
        b.until_waiting(&id, 5).await;
        a.until_waiting(&id, 5).await;
        there.abort();
    }
    here.abort();
}

/// A borrow of `pool` on `server` that waits up to 30 s, on its own task.
fn borrow_later(server: &Server, pool: &str) -> tokio::task::JoinHandle<()> {
    let (http, url) = (server.http.clone(), server.url(&format!("{pool}/borrow")));
    tokio::spawn(async move {
        let _ = http
            .post(url)
            .json(&json!({"ttl": 60, "wait": 30}))
            .send()
            .await;
    })
}
