//! Listing a Redis store's pools: an index of ids the store keeps beside
//! the pools. Pools made by a build without the index (here: the index
//! and its marker deleted) are indexed at the next connect to the server,
//! once; an id whose pool is gone is skipped.

use std::sync::Arc;

use semaphore_redis::store::Store;
use semaphore_redis::testing::TestServer;
use semaphore_redis::{Pool, PoolId, RedisOptions, RedisStore};

async fn store(prefix: &str) -> Arc<dyn Store> {
    let options = RedisOptions::default().prefix(prefix);
    Arc::new(
        RedisStore::connect_with(TestServer::shared().url(), options)
            .await
            .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_made_before_the_index_are_listed_after_a_connect() {
    let prefix = TestServer::fresh_prefix();
    let first = store(&prefix).await;
    let mut ids: Vec<PoolId> = (0..3)
        .map(|i| PoolId::from_name(&format!("{prefix}-{i}")))
        .collect();
    for id in &ids {
        Pool::new(first.clone(), *id).register(2).await.unwrap();
    }
    // As a build without the index left them.
    TestServer::shared().command(&format!("DEL {prefix}:pools {prefix}:pools:indexed"));
    assert!(
        Pool::list(&first, None, 10).await.unwrap().is_empty(),
        "unlisted"
    );

    let second = store(&prefix).await;
    ids.sort();
    let listed: Vec<PoolId> = Pool::list(&second, None, 10)
        .await
        .unwrap()
        .iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(listed, ids, "indexed at the connect");
    let marked = TestServer::shared().command(&format!("EXISTS {prefix}:pools:indexed"));
    assert_eq!(marked.trim(), ":1", "marked once indexed");

    // An id whose pool is gone (a register that failed after its id was
    // added, say) is skipped.
    TestServer::shared().command(&format!(
        "ZADD {prefix}:pools 0 {}",
        PoolId::from_name("gone").as_uuid()
    ));
    let again = Pool::list(&second, None, 10).await.unwrap();
    assert_eq!(again.len(), 3, "{again:?}");
}
