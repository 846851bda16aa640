//! A master's failover on a real Redis Cluster, made to lose the newest
//! grant: the replica is stopped (SIGSTOP) while a lease is granted on its
//! master, so the grant never reaches it; then the master is killed and
//! the replica, resumed, is promoted. The rule "Restart grace, for every
//! loss of state" must hold: nothing is granted on the slot until the lost
//! lease's ttl has passed, and tokens keep growing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use semaphore_redis::testing::TestCluster;
use semaphore_redis::{Error, Pool, PoolId, RedisOptions, RedisStore};

const TTL: Duration = Duration::from_secs(10);

fn options() -> RedisOptions {
    RedisOptions::default()
        .session_timeout(Duration::from_secs(1))
        .restart_grace(TTL)
        .response_timeout(Duration::from_millis(500))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_that_lost_a_grant_over_issues_nothing_and_tokens_grow() {
    let cluster = TestCluster::start().unwrap();
    let urls = cluster.urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let connect = || async {
        Arc::new(
            RedisStore::connect_cluster_with(&urls, options())
                .await
                .expect("a store on the cluster"),
        )
    };
    let (a, b) = (connect().await, connect().await);
    let id = PoolId::from_name("failover");
    let (on_a, on_b) = (Pool::new(a, id), Pool::new(b, id));
    on_a.register(1).await.unwrap();
    let (master, replica) = cluster.serving(&id.as_uuid().to_string()).unwrap();

    // The young cluster's own grace first (its nodes started just now).
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Err(Error::Exhausted { .. }) = on_a.try_borrow(TTL).await.map(|g| g.forget()) {
        assert!(Instant::now() < deadline, "nothing granted within 60 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    on_a.force_return(0).await.unwrap();

    // The grant reaches the master only: the replica is stopped and its
    // link cut, so the master keeps the grant in its backlog.
    cluster.signal(replica, "STOP");
    let cut = cluster.command(master, "CLIENT KILL TYPE replica");
    assert!(cut.starts_with(":1"), "{cut}");
    let sent = Instant::now();
    let lost = on_a.try_borrow(TTL).await.unwrap().forget();
    let lost_until = sent + TTL;
    cluster.signal(master, "KILL");
    cluster.signal(replica, "CONT");

    // Another borrower asks until the promoted replica grants.
    let deadline = Instant::now() + Duration::from_secs(60);
    let granted = loop {
        assert!(Instant::now() < deadline, "nothing granted within 60 s");
        match on_b.try_borrow(TTL).await {
            Ok(guard) => break guard.forget(),
            Err(Error::Exhausted { .. } | Error::PoolNotFound { .. }) => {}
            Err(e @ Error::Storage { .. }) if e.is_retryable() => {}
            Err(e) => panic!("{e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let at = Instant::now();
    assert!(cluster.is_master(replica), "the replica was promoted");
    assert!(
        at >= lost_until,
        "the slot went to a second holder {:?} before the lost lease's end",
        lost_until - at
    );
    assert!(
        granted.token > lost.token,
        "tokens grow: {} after {}",
        granted.token,
        lost.token
    );
}
