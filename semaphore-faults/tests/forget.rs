//! A process that forgets a lease and returns from `main` at
//! once leaves it to its ttl, not to its session's end, on every networked
//! store (MySQL lost it in 10 of 10 runs, Redis in
//! 3 of 20, when the unbinding did not land before the process exited).

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use semaphore_sqlite::store::Store;
use semaphore_sqlite::{LeaseId, Pool, PoolId};

/// The session timeout of the forgetting process: its session ends this
/// long after its last heartbeat, and with it every lease still bound.
const SESSION: Duration = Duration::from_secs(1);

/// Runs `faults-forget` on `store`; the forgotten lease's id.
fn forget_and_exit(store: &str, url: &str, namespace: &str, pool: &str) -> LeaseId {
    let output = Command::new(env!("CARGO_BIN_EXE_faults-forget"))
        .args([store, url, namespace, pool])
        .arg(SESSION.as_millis().to_string())
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let id = String::from_utf8_lossy(&output.stdout).trim().to_string();
    LeaseId::from_uuid(
        id.parse()
            .unwrap_or_else(|_| panic!("no lease id: {output:?}")),
    )
}

/// The lease is still held well past the process's session end: checked
/// after three session timeouts, by another handle.
async fn still_held(store: Arc<dyn Store>, pool: &str, id: LeaseId) {
    tokio::time::sleep(SESSION * 3).await;
    let holders = Pool::new(store, PoolId::from_name(pool))
        .holders()
        .await
        .unwrap();
    assert!(
        holders.iter().any(|h| h.lease.id == id),
        "the forgotten lease ended with its process's session: {holders:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgotten_lease_outlives_its_process_on_postgres() {
    let server = semaphore_postgres::testing::TestServer::shared();
    let schema = semaphore_postgres::testing::TestServer::fresh_schema();
    let id = forget_and_exit("postgres", server.url(), &schema, "forgotten");
    let options = semaphore_postgres::PostgresOptions::default().schema(&schema);
    let store = semaphore_postgres::PostgresStore::connect_with(server.url(), options)
        .await
        .unwrap();
    still_held(Arc::new(store), "forgotten", id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgotten_lease_outlives_its_process_on_redis() {
    let server = semaphore_redis::testing::TestServer::shared();
    let prefix = semaphore_redis::testing::TestServer::fresh_prefix();
    let id = forget_and_exit("redis", server.url(), &prefix, "forgotten");
    let options = semaphore_redis::RedisOptions::default()
        .prefix(&prefix)
        .restart_grace(Duration::ZERO);
    let store = semaphore_redis::RedisStore::connect_with(server.url(), options)
        .await
        .unwrap();
    still_held(Arc::new(store), "forgotten", id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgotten_lease_outlives_its_process_on_mysql() {
    let server = semaphore_mysql::testing::TestServer::shared();
    let prefix = semaphore_mysql::testing::TestServer::fresh_prefix();
    let id = forget_and_exit("mysql", server.url(), &prefix, "forgotten");
    let options = semaphore_mysql::MysqlOptions::default().table_prefix(&prefix);
    let store = semaphore_mysql::MysqlStore::connect_with(server.url(), options)
        .await
        .unwrap();
    still_held(Arc::new(store), "forgotten", id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgotten_lease_outlives_its_process_on_etcd() {
    use semaphore_etcd::testing::TestCluster;
    let (cluster, prefix) = (TestCluster::shared(), TestCluster::fresh_prefix());
    let id = forget_and_exit("etcd", &cluster.endpoints()[0], &prefix, "forgotten");
    let options = semaphore_etcd::EtcdOptions::default().prefix(&prefix);
    let store = semaphore_etcd::EtcdStore::connect_with(cluster.endpoints(), options)
        .await
        .unwrap();
    still_held(Arc::new(store), "forgotten", id).await;
}
