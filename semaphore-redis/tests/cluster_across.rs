//! The borrow of pools on several hash slots of a real Redis Cluster
//! (check, then take; see the crate's README), through the store's
//! primitives, in cases a whole-suite run cannot set up.

use std::sync::Arc;
use std::time::Duration;

use semaphore_redis::store::{BorrowRequest, Store, TryBorrow, TryBorrowAll};
use semaphore_redis::testing::{TestCluster, TestServer};
use semaphore_redis::{LeaseId, Pool, PoolId, RedisOptions, RedisStore};

const TTL: Duration = Duration::from_secs(60);

async fn store() -> Arc<RedisStore> {
    let urls: Vec<&str> = TestCluster::shared().iter().map(String::as_str).collect();
    let options = RedisOptions::default()
        .prefix(TestServer::fresh_prefix())
        .restart_grace(Duration::ZERO);
    Arc::new(
        RedisStore::connect_cluster_with(&urls, options)
            .await
            .unwrap(),
    )
}

/// Two pools of count 1 on different hash slots.
async fn two_slots(store: &Arc<RedisStore>) -> (Pool, Pool) {
    let a = Pool::new(store.clone(), PoolId::from_name("across-a"));
    let b = Pool::new(store.clone(), PoolId::from_name("across-b"));
    assert_ne!(store.hash_slot(a.id()), store.hash_slot(b.id()));
    a.register(1).await.unwrap();
    b.register(1).await.unwrap();
    (a, b)
}

/// Rule "Lost replies": a set borrow whose earlier try granted one pool
/// under its lease id (the reply lost), then refused on the other, gives
/// that lease back, rather than leaving it held by nobody for its ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_retry_gives_back_what_its_lost_reply_granted() {
    let store = store().await;
    let (a, b) = two_slots(&store).await;
    let (on_a, on_b) = (LeaseId::new(), LeaseId::new());
    let landed = store
        .try_borrow(&BorrowRequest::new(b.id(), on_b, TTL))
        .await
        .unwrap();
    assert!(matches!(landed, TryBorrow::Granted { .. }), "{landed:?}");
    let _full = a.try_borrow(TTL).await.unwrap();
    let retry = [
        BorrowRequest::new(a.id(), on_a, TTL),
        BorrowRequest::new(b.id(), on_b, TTL),
    ];
    let answer = store.try_borrow_all(&retry).await.unwrap();
    assert!(
        matches!(answer, TryBorrowAll::Exhausted { .. }),
        "{answer:?}"
    );
    assert_eq!(b.inspect().await.unwrap().in_use, 0, "held by nobody");
}

/// A set borrow refused on a later slot gives back what it took on the
/// earlier ones, and nothing taken by another borrow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_set_borrow_holds_nothing() {
    let store = store().await;
    let (a, b) = two_slots(&store).await;
    let _full = b.try_borrow(TTL).await.unwrap();
    let set = [
        BorrowRequest::new(a.id(), LeaseId::new(), TTL),
        BorrowRequest::new(b.id(), LeaseId::new(), TTL),
    ];
    let answer = store.try_borrow_all(&set).await.unwrap();
    assert!(
        matches!(answer, TryBorrowAll::Exhausted { .. }),
        "{answer:?}"
    );
    assert_eq!(a.inspect().await.unwrap().in_use, 0);
    assert_eq!(b.inspect().await.unwrap().in_use, 1);
}
