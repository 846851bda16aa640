//! A three-member etcd cluster: the store keeps its rules while a member,
//! the leader among them, is killed and started again.

use std::sync::Arc;
use std::time::Duration;

use semaphore_etcd::testing::TestCluster;
use semaphore_etcd::{EtcdOptions, EtcdStore, Pool, PoolId};

/// Leases taken before the leader dies stay held (their tokens below
/// every later one), a new lease is granted while it is down, and the
/// restarted member serves the same state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leaders_death_loses_no_lease_and_reuses_no_token() {
    let cluster = tokio::task::spawn_blocking(TestCluster::start_three)
        .await
        .unwrap()
        .expect("a three-member etcd cluster");
    let store = EtcdStore::connect_with(
        cluster.endpoints(),
        EtcdOptions::default().prefix(TestCluster::fresh_prefix()),
    )
    .await
    .unwrap();
    let pool = Pool::new(Arc::new(store), PoolId::from_name("three"));
    pool.register(3).await.unwrap();
    let first = pool.try_borrow(Duration::from_secs(60)).await.unwrap();
    let leader = cluster.leader().expect("a leader");
    cluster.signal(leader, "KILL");
    // The others elect a leader; the store's calls go on through them.
    let second = loop {
        match pool.try_borrow(Duration::from_secs(60)).await {
            Ok(lease) => break lease,
            Err(e) => assert!(
                matches!(
                    e,
                    semaphore_etcd::Error::Storage {
                        retryable: true,
                        ..
                    }
                ),
                "{e}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!((first.position, second.position), (0, 1));
    assert!(second.token > first.token);
    let restarted = tokio::task::spawn_blocking(move || {
        cluster.restart(leader);
        cluster
    });
    let cluster = restarted.await.unwrap();
    assert_eq!(pool.inspect().await.unwrap().in_use, 2);
    assert!(first.is_held() && second.is_held());
    drop(cluster);
}
