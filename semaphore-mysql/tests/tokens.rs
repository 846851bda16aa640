//! Fencing tokens kept per pool: a grant's token is one more than the
//! greater of its pool's last token and the store's floor, which a delete
//! raises to the pool's; grants on different pools write no shared row.
//! Also a store of version 1, which counted tokens in the store's row
//! only: it is migrated, and tokens go on above that count.

use std::sync::Arc;
use std::time::Duration;

use semaphore_mysql::mysql_async::prelude::Queryable;
use semaphore_mysql::testing::TestServer;
use semaphore_mysql::{BorrowOptions, MysqlOptions, MysqlStore, Pool, PoolId};

const TTL: Duration = Duration::from_secs(60);

async fn store(prefix: &str) -> Arc<MysqlStore> {
    let options = MysqlOptions::default().table_prefix(prefix);
    Arc::new(
        MysqlStore::connect_with(TestServer::shared().url(), options)
            .await
            .expect("a MySQL store on the test server"),
    )
}

async fn floor(store: &MysqlStore, prefix: &str) -> i64 {
    let mut conn = store.connection_pool().get_conn().await.unwrap();
    conn.query_first(format!(
        "SELECT last_token FROM {prefix}_store WHERE id = 1"
    ))
    .await
    .unwrap()
    .unwrap()
}

async fn sql(store: &MysqlStore, statement: String) {
    let mut conn = store.connection_pool().get_conn().await.unwrap();
    conn.query_drop(statement).await.unwrap();
}

/// Plain and keyed grants (the procedure and the statement-by-statement
/// path) on two pools leave the store's row alone, and each pool's tokens
/// rise; a floor raised meanwhile is passed; a delete keeps the pool's last
/// token in the floor, so the pool registered again goes on above it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_rise_per_pool_above_the_floor_and_survive_delete() {
    let prefix = TestServer::fresh_prefix();
    let store = store(&prefix).await;
    let a = Pool::new(store.clone(), PoolId::from_name("a"));
    let b = Pool::new(store.clone(), PoolId::from_name("b"));
    a.register(2).await.unwrap();
    b.register(2).await.unwrap();
    let before = floor(&store, &prefix).await;
    let mut last = 0;
    for pool in [&a, &b, &a, &b] {
        let lease = pool.try_borrow(TTL).await.unwrap();
        let keyed = pool
            .borrow_with(TTL, Duration::ZERO, BorrowOptions::new().key("k"))
            .await
            .unwrap();
        assert!(keyed.token > lease.token);
        last = last.max(keyed.token);
        lease.release().await.unwrap();
        keyed.release().await.unwrap();
    }
    assert_eq!(
        floor(&store, &prefix).await,
        before,
        "a grant wrote the store's row"
    );

    // A floor raised by a process of the earlier release (which counted in
    // the store's row) is passed by both paths.
    sql(
        &store,
        format!("UPDATE {prefix}_store SET last_token = 1000 WHERE id = 1"),
    )
    .await;
    let lease = a.try_borrow(TTL).await.unwrap();
    assert_eq!(lease.token, 1001);
    let keyed = b
        .borrow_with(TTL, Duration::ZERO, BorrowOptions::new().key("k"))
        .await
        .unwrap();
    assert_eq!(keyed.token, 1001, "b's last token was below the floor");
    let next = a.try_borrow(TTL).await.unwrap();
    assert_eq!(next.token, 1002);
    assert!(last < 1000);

    // A delete keeps a's last token (1002) in the floor.
    assert!(a.delete().await.unwrap());
    assert_eq!(floor(&store, &prefix).await, 1002);
    a.register(2).await.unwrap();
    assert_eq!(a.try_borrow(TTL).await.unwrap().token, 1003);
    drop((lease, keyed, next));
}

/// A store of version 1 (no `last_token` per pool): a store connecting to
/// it adds the column and sets version 2 (then 3 and 4), and grants go on
/// above the count version 1 kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_of_version_1_is_migrated() {
    let prefix = TestServer::fresh_prefix();
    let old = store(&prefix).await;
    let pool = Pool::new(old.clone(), PoolId::from_name("p"));
    pool.register(1).await.unwrap();
    sql(
        &old,
        format!("ALTER TABLE {prefix}_pools DROP COLUMN last_token"),
    )
    .await;
    sql(
        &old,
        format!("ALTER TABLE {prefix}_waiters DROP COLUMN since"),
    )
    .await;
    sql(
        &old,
        format!("UPDATE {prefix}_store SET last_token = 77, version = 1 WHERE id = 1"),
    )
    .await;
    drop((pool, old));

    let store = store(&prefix).await;
    let mut conn = store.connection_pool().get_conn().await.unwrap();
    let version: Option<i64> = conn
        .query_first(format!("SELECT version FROM {prefix}_store WHERE id = 1"))
        .await
        .unwrap();
    assert_eq!(version, Some(4));
    drop(conn);
    let pool = Pool::new(store, PoolId::from_name("p"));
    let lease = pool.try_borrow(TTL).await.unwrap();
    assert_eq!(lease.token, 78);
    lease.release().await.unwrap();
}

/// A store of version 2 (no sessions; a bound lease named its holder's
/// named lock; places without a connection): a store connecting to it adds
/// the sessions table and the places' column, unbinds every lease (its
/// holder's process is gone before a migration), keeps it, and sets
/// version 3, then 4.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_of_version_2_is_migrated() {
    let prefix = TestServer::fresh_prefix();
    let old = store(&prefix).await;
    let pool = Pool::new(old.clone(), PoolId::from_name("p"));
    pool.register(2).await.unwrap();
    let kept = pool.try_borrow(TTL).await.unwrap().forget();
    sql(
        &old,
        format!("ALTER TABLE {prefix}_waiters DROP COLUMN holder, DROP COLUMN since"),
    )
    .await;
    sql(&old, format!("DROP TABLE {prefix}_sessions")).await;
    sql(
        &old,
        format!("UPDATE {prefix}_leases SET holder = UNHEX(REPEAT('ab', 16))"),
    )
    .await;
    sql(
        &old,
        format!("UPDATE {prefix}_store SET version = 2 WHERE id = 1"),
    )
    .await;
    drop((pool, old));

    let store = store(&prefix).await;
    let mut conn = store.connection_pool().get_conn().await.unwrap();
    let version: Option<i64> = conn
        .query_first(format!("SELECT version FROM {prefix}_store WHERE id = 1"))
        .await
        .unwrap();
    assert_eq!(version, Some(4));
    let bound: Option<i64> = conn
        .query_first(format!(
            "SELECT COUNT(*) FROM {prefix}_leases WHERE holder IS NOT NULL"
        ))
        .await
        .unwrap();
    assert_eq!(bound, Some(0), "the leases of version 2 are unbound");
    drop(conn);
    let pool = Pool::new(store, PoolId::from_name("p"));
    assert_eq!(
        pool.inspect().await.unwrap().in_use,
        1,
        "the lease was kept"
    );
    let next = pool.try_borrow(TTL).await.unwrap();
    assert_eq!(next.position, 1);
    assert!(next.token > kept.token);
    assert!(pool.return_lease(kept.id).await.unwrap());
}

/// A store of version 3 (places without the instant they were taken): a
/// store connecting to it adds the column and sets version 4; a place
/// taken before has none (now stands in), one taken after has its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_of_version_3_is_migrated() {
    let prefix = TestServer::fresh_prefix();
    let old = store(&prefix).await;
    sql(
        &old,
        format!("ALTER TABLE {prefix}_waiters DROP COLUMN since"),
    )
    .await;
    sql(
        &old,
        format!("UPDATE {prefix}_store SET version = 3 WHERE id = 1"),
    )
    .await;
    drop(old);

    let store = store(&prefix).await;
    let mut conn = store.connection_pool().get_conn().await.unwrap();
    let version: Option<i64> = conn
        .query_first(format!("SELECT version FROM {prefix}_store WHERE id = 1"))
        .await
        .unwrap();
    assert_eq!(version, Some(4));
    drop(conn);
    let pool = Pool::new(store.clone(), PoolId::from_name("p"));
    pool.register(1).await.unwrap();
    let _held = pool.try_borrow(TTL).await.unwrap();
    let ticket = semaphore_mysql::WaiterId::new();
    let queued = pool
        .held(ticket)
        .wait(
            Duration::from_secs(30),
            TTL,
            Duration::ZERO,
            BorrowOptions::new(),
        )
        .await
        .unwrap();
    assert!(queued.is_none());
    let places = semaphore_mysql::store::Store::queue(&*store, pool.id())
        .await
        .unwrap();
    assert_eq!(places.len(), 1);
    assert_eq!(places[0].waiter, Some(ticket));
}
