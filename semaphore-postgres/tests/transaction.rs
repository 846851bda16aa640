//! Leases inside a transaction the application owns, on a real server: the
//! lease commits or rolls back with the application's own writes.

use std::sync::Arc;
use std::time::Duration;

use semaphore_core::conformance::until_waiting;
use semaphore_postgres::testing::TestServer;
use semaphore_postgres::tokio_postgres::{self, Client, NoTls};
use semaphore_postgres::{BorrowOptions, Error, Pool, PoolId, PostgresOptions, PostgresStore};

const TTL: Duration = Duration::from_secs(60);

async fn setup() -> (Arc<PostgresStore>, Pool, Client) {
    let url = TestServer::shared().url();
    let options = PostgresOptions::default().schema(TestServer::fresh_schema());
    let store = Arc::new(PostgresStore::connect_with(url, options).await.unwrap());
    let pool = Pool::new(store.clone(), PoolId::from_name("exports"));
    pool.register(1).await.unwrap();
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.unwrap();
    tokio::spawn(connection);
    (store, pool, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_borrow_commits_or_rolls_back_with_the_transaction() {
    let (store, pool, mut client) = setup().await;

    let tx = client.transaction().await.unwrap();
    let rolled = store
        .borrow_in(&tx, &pool, TTL, BorrowOptions::new())
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(
        pool.inspect().await.unwrap().in_use,
        0,
        "a rolled-back lease stayed"
    );

    let tx = client.transaction().await.unwrap();
    let kept = store
        .borrow_in(&tx, &pool, TTL, BorrowOptions::new())
        .await
        .unwrap();
    assert_eq!(
        pool.inspect().await.unwrap().in_use,
        0,
        "seen before the commit"
    );
    tx.commit().await.unwrap();
    assert_eq!(pool.inspect().await.unwrap().in_use, 1);
    assert_eq!(kept.position, 0);
    assert!(
        kept.token > rolled.token,
        "a rolled-back token was handed out again"
    );

    // Full: a borrow in a transaction does not wait.
    let tx = client.transaction().await.unwrap();
    match store.borrow_in(&tx, &pool, TTL, BorrowOptions::new()).await {
        Err(Error::Exhausted { waited, .. }) => assert_eq!(waited, Duration::ZERO),
        other => panic!("expected Exhausted at once, got {other:?}"),
    }
    tx.rollback().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_return_frees_the_slot_and_wakes_a_waiter() {
    let (store, pool, mut client) = setup().await;
    let held = pool.try_borrow(TTL).await.unwrap().forget();
    let waiter = {
        let pool = pool.clone();
        tokio::spawn(async move {
            pool.borrow(TTL, Duration::from_secs(30))
                .await
                .map(|g| g.forget())
        })
    };
    until_waiting(&pool, 1).await;

    let tx = client.transaction().await.unwrap();
    assert!(store.return_in(&tx, &pool, held.id).await.unwrap());
    tx.rollback().await.unwrap();
    assert_eq!(
        pool.inspect().await.unwrap().in_use,
        1,
        "a rolled-back return freed the slot"
    );

    let tx = client.transaction().await.unwrap();
    assert!(store.return_in(&tx, &pool, held.id).await.unwrap());
    tx.commit().await.unwrap();
    let next = waiter.await.unwrap().unwrap();
    assert_eq!(next.position, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_on_another_store_is_refused() {
    let (store, _pool, mut client) = setup().await;
    let (_other_store, other, _) = setup().await;
    let tx = client.transaction().await.unwrap();
    match store
        .borrow_in(&tx, &other, TTL, BorrowOptions::new())
        .await
    {
        Err(Error::InvalidArgument { field: "pool", .. }) => {}
        other => panic!("expected InvalidArgument naming pool, got {other:?}"),
    }
}
