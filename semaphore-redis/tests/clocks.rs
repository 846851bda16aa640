//! Machines whose clocks disagree, on one Redis server (rule "Time", R7,
//! R10): two stores whose process clocks are 30 s ahead and 30 s behind.
//! The server's clock decides, so neither can take a live lease or write
//! one already expired; each times its waits by its view of the server's
//! clock, corrected by the offset it measured.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use semaphore_core::conformance::{self, OffsetClock};
use semaphore_redis::testing::TestServer;
use semaphore_redis::{Pool, PoolId, RedisOptions, RedisStore};

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
    let (on_fast, on_slow) = (Pool::new(fast, id), Pool::new(slow.clone(), id));
    conformance::clocks_thirty_seconds_apart_never_over_issue_or_take_a_live_lease(
        &on_fast,
        &on_slow,
        async || server_now(&slow).await,
    )
    .await;
}
