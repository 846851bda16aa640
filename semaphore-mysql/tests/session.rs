//! The store's session settings (READ COMMITTED, UTC, a 5 s lock wait) hold
//! on every statement, not only on a connection's first use: a pooled
//! connection handed out again must not have been reset to the server's
//! defaults, nor its prepared statements dropped (each would then be
//! prepared again, a round trip more per primitive: BENCHMARKS.md line 17).
//! On a throwaway server of its own, whose global counters only this test
//! moves.

use std::sync::Arc;
use std::time::Duration;

use semaphore_mysql::mysql_async::prelude::Queryable;
use semaphore_mysql::testing::TestServer;
use semaphore_mysql::{MysqlOptions, MysqlStore, Pool, PoolId};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_connection_keeps_the_stores_session_settings_and_statements() {
    let server = TestServer::start().unwrap();
    let options = MysqlOptions::default()
        .table_prefix(TestServer::fresh_prefix())
        .pool_size(1);
    let store = Arc::new(
        MysqlStore::connect_with(server.url(), options)
            .await
            .expect("a MySQL store on the test server"),
    );
    let pool = Pool::new(store.clone(), PoolId::from_name("session"));
    pool.register(2).await.unwrap();
    let pair = || async {
        let lease = pool.try_borrow(Duration::from_secs(60)).await.unwrap();
        lease.release().await.unwrap();
    };
    pair().await;
    let before = (
        status(&store, "Connections").await,
        status(&store, "Com_stmt_prepare").await,
    );
    for _ in 0..3 {
        pair().await;
    }
    assert_eq!(
        status(&store, "Connections").await,
        before.0,
        "the pool opened connections again instead of keeping its idle one"
    );
    assert_eq!(
        status(&store, "Com_stmt_prepare").await,
        before.1,
        "statements were prepared again: the connection's statement cache was dropped"
    );
    // The pool's one connection, handed out many times over.
    let mut conn = store.connection_pool().get_conn().await.unwrap();
    let (wait, zone): (i64, String) = conn
        .query_first("SELECT @@session.innodb_lock_wait_timeout, @@session.time_zone")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (wait, zone.as_str()),
        (5, "+00:00"),
        "the connection was reset to the server's session defaults"
    );
    let isolation: Option<String> = conn
        .query_first("SELECT @@session.tx_isolation")
        .await
        .or(conn
            .query_first("SELECT @@session.transaction_isolation")
            .await)
        .unwrap();
    assert_eq!(isolation.as_deref(), Some("READ-COMMITTED"));
}

/// The server's global status counter `name` (connections opened,
/// statements prepared), which the store's holder and poll move only once.
async fn status(store: &MysqlStore, name: &str) -> u64 {
    let mut conn = store.connection_pool().get_conn().await.unwrap();
    let (_, n): (String, u64) = conn
        .query_first(format!("SHOW GLOBAL STATUS LIKE '{name}'"))
        .await
        .unwrap()
        .unwrap();
    n
}
