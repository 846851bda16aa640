//! A keyed borrow answered with a lease another handle holds (another
//! process's, here a second store handle with a session of its own) gets
//! a guard that never says it holds the lease, and whose drop does not
//! return it: the slot stays its holder's, who still holds it (a
//! hostile review once saw the drop free it and a third borrower take it
//! while the holder said it held it, on every networked store).

use std::sync::Arc;
use std::time::Duration;

use semaphore_sqlite::store::Store;
use semaphore_sqlite::{BorrowOptions, Pool, PoolId};

async fn the_holder_keeps_its_slot(first: Arc<dyn Store>, second: Arc<dyn Store>) {
    let (a, b) = (
        Pool::new(first, PoolId::from_name("keyed")),
        Pool::new(second, PoolId::from_name("keyed")),
    );
    a.register(1).await.unwrap();
    let ttl = Duration::from_secs(60);
    let held = a
        .borrow_with(ttl, Duration::ZERO, BorrowOptions::new().key("K1"))
        .await
        .unwrap();
    let answered = b
        .borrow_with(ttl, Duration::ZERO, BorrowOptions::new().key("K1"))
        .await
        .unwrap();
    assert_eq!(answered.id, held.id);
    assert!(!answered.is_held(), "the second handle does not hold it");
    drop(answered);
    // Any return the drop made would be done by the time a keyed look
    // from the second handle comes back (the same connection pool, in
    // order); the lease must still be there, and the pool full.
    let again = b
        .borrow_with(ttl, Duration::ZERO, BorrowOptions::new().key("K1"))
        .await
        .unwrap();
    assert_eq!(again.id, held.id);
    drop(again);
    assert_eq!(a.inspect().await.unwrap().in_use, 1);
    assert!(held.is_held());
    assert!(
        b.try_borrow(ttl).await.is_err(),
        "a third borrower got the slot"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres() {
    let server = semaphore_postgres::testing::TestServer::shared();
    let schema = semaphore_postgres::testing::TestServer::fresh_schema();
    let connect = || async {
        let options = semaphore_postgres::PostgresOptions::default().schema(&schema);
        let store = semaphore_postgres::PostgresStore::connect_with(server.url(), options);
        Arc::new(store.await.unwrap()) as Arc<dyn Store>
    };
    the_holder_keeps_its_slot(connect().await, connect().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis() {
    let server = semaphore_redis::testing::TestServer::shared();
    let prefix = semaphore_redis::testing::TestServer::fresh_prefix();
    let connect = || async {
        let options = semaphore_redis::RedisOptions::default()
            .prefix(&prefix)
            .restart_grace(Duration::ZERO);
        let store = semaphore_redis::RedisStore::connect_with(server.url(), options);
        Arc::new(store.await.unwrap()) as Arc<dyn Store>
    };
    the_holder_keeps_its_slot(connect().await, connect().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_mysql() {
    let server = semaphore_mysql::testing::TestServer::shared();
    let prefix = semaphore_mysql::testing::TestServer::fresh_prefix();
    let connect = || async {
        let options = semaphore_mysql::MysqlOptions::default().table_prefix(&prefix);
        let store = semaphore_mysql::MysqlStore::connect_with(server.url(), options);
        Arc::new(store.await.unwrap()) as Arc<dyn Store>
    };
    the_holder_keeps_its_slot(connect().await, connect().await).await;
}
