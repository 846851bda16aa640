//! Machines whose clocks disagree, on one Redis server (SPEC "Time", R7,
//! R10): two stores whose process clocks are 30 s ahead and 30 s behind.
//! The server's clock decides, so neither can take a live lease or write
//! one already expired; each times its waits by its view of the server's
//! clock, corrected by the offset it measured.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use semaphore_core::conformance::OffsetClock;
use semaphore_redis::testing::TestServer;
use semaphore_redis::{Error, Pool, PoolId, RedisOptions, RedisStore};

const OFF: Duration = Duration::from_secs(30);

async fn store(prefix: &str, clock: OffsetClock) -> RedisStore {
    let options = RedisOptions::default()
        .prefix(prefix)
        .restart_grace(Duration::ZERO)
        .clock(Arc::new(clock));
    RedisStore::connect_with(TestServer::shared().url(), options)
        .await
        .unwrap()
}

/// The server's clock now.
async fn server_now(store: &RedisStore) -> SystemTime {
    let mut connection = store.connection().clone();
    let (s, us): (u64, u64) = semaphore_redis::redis::cmd("TIME")
        .query_async(&mut connection)
        .await
        .unwrap();
    SystemTime::UNIX_EPOCH + Duration::from_secs(s) + Duration::from_micros(us)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clocks_thirty_seconds_apart_never_over_issue_or_take_a_live_lease() {
    let prefix = TestServer::fresh_prefix();
    let fast = store(&prefix, OffsetClock::ahead(OFF)).await;
    let slow = store(&prefix, OffsetClock::behind(OFF)).await;
    let (off, ahead) = fast.server_clock().unwrap().offset();
    assert!(
        !ahead && off.abs_diff(OFF) < Duration::from_secs(1),
        "{off:?}"
    );
    let (off, ahead) = slow.server_clock().unwrap().offset();
    assert!(
        ahead && off.abs_diff(OFF) < Duration::from_secs(1),
        "{off:?}"
    );

    let (fast, slow) = (Arc::new(fast), Arc::new(slow));
    let id = PoolId::from_name("one");
    let on_fast = Pool::new(fast.clone(), id);
    let on_slow = Pool::new(slow.clone(), id);
    on_fast.register(1).await.unwrap();

    // A lease taken by the slow machine is not born expired...
    let held = on_slow.try_borrow(Duration::from_secs(20)).await.unwrap();
    assert!(held.expires_at > server_now(&slow).await, "born expired");
    // ...and the fast machine, for which it "expired" 10 s ago, cannot take it.
    match on_fast.try_borrow(Duration::from_secs(20)).await {
        Err(Error::Exhausted { .. }) => {}
        other => panic!("the fast machine took a live lease: {other:?}"),
    }
    assert_eq!(on_fast.inspect().await.unwrap().in_use, 1);
    drop(held);
    semaphore_core::conformance::until_in_use(&on_fast, 0).await;

    // A short lease held by the fast machine frees itself by the server's
    // clock, and the slow machine's waiter gets it then, not before.
    let short = on_fast
        .try_borrow(Duration::from_millis(300))
        .await
        .unwrap()
        .forget();
    let ttl = Duration::from_secs(20);
    let next = on_slow.borrow(ttl, Duration::from_secs(10)).await.unwrap();
    assert_eq!(next.position, 0);
    assert!(next.token > short.token);
    let granted_at = next.expires_at - ttl;
    assert!(
        granted_at >= short.expires_at,
        "granted at {granted_at:?}, before the lease it replaced expired at {:?}",
        short.expires_at
    );
}
