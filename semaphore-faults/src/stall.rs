//! A call to a stalled store fails instead of hanging (a hostile
//! test: with the holder's network frozen, `release().await` was still
//! blocked after 90 s on PostgreSQL and MySQL, and `semaphore run` stayed
//! up for as long as the stall lasted). Every call of a networked store is
//! bounded by `CALL_TIMEOUT`; the bytes here stop moving, nothing closes.

use std::sync::Arc;
use std::time::Duration;

use semaphore_sqlite::store::Store;
use semaphore_sqlite::{Pool, PoolId};

use crate::StoreKind;
use crate::server::Server;

/// A store of `kind` through a proxy; a lease is borrowed, the proxy
/// stalls, and the lease's release must end (with an error) well within
/// a guard of three call timeouts.
async fn release_ends_while_stalled(kind: StoreKind) {
    let (server, namespace, proxy) =
        Server::proxied(kind, "stalled", 1, Duration::from_secs(60)).await;
    let (url, _) = server.holder_url(proxy.port(), 0);
    let store: Arc<dyn Store> = match kind {
        StoreKind::Postgres => Arc::new(
            semaphore_postgres::PostgresStore::connect_with(
                &url,
                semaphore_postgres::PostgresOptions::default().schema(&namespace),
            )
            .await
            .unwrap(),
        ),
        StoreKind::Mysql => Arc::new(
            semaphore_mysql::MysqlStore::connect_with(
                &url,
                semaphore_mysql::MysqlOptions::default().table_prefix(&namespace),
            )
            .await
            .unwrap(),
        ),
        StoreKind::Etcd => Arc::new(
            semaphore_etcd::EtcdStore::connect_with(
                &[url.as_str()],
                semaphore_etcd::EtcdOptions::default().prefix(&namespace),
            )
            .await
            .unwrap(),
        ),
        other => panic!("not a store this test covers: {other:?}"),
    };
    let pool = Pool::new(store, PoolId::from_name("stalled"));
    let guard = pool.try_borrow(Duration::from_secs(60)).await.unwrap();
    proxy.stall();
    let guard_time = semaphore_sqlite::store::CALL_TIMEOUT * 3;
    let released = tokio::time::timeout(guard_time, guard.release()).await;
    assert!(
        matches!(released, Ok(Err(_))),
        "the release did not end with an error while stalled: {released:?}"
    );
    proxy.resume();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_ends_while_postgres_is_stalled() {
    release_ends_while_stalled(StoreKind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_ends_while_mysql_is_stalled() {
    release_ends_while_stalled(StoreKind::Mysql).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_ends_while_etcd_is_stalled() {
    release_ends_while_stalled(StoreKind::Etcd).await;
}
