//! Machines whose clocks disagree, on one database (issue 12; rule "Time",
//! R7, R10): two stores whose process clocks are 30 s ahead and 30 s behind.
//! The server's clock decides, so neither can take a live lease or write
//! one already expired; each times its waits by its view of the server's
//! clock, corrected by the offset it measured.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use semaphore_core::conformance::{self, OffsetClock};
use semaphore_postgres::store::from_unix_ms;
use semaphore_postgres::testing::TestServer;
use semaphore_postgres::{Pool, PoolId, PostgresOptions, PostgresStore};

const OFF: Duration = Duration::from_secs(30);

async fn store(schema: &str, clock: OffsetClock) -> PostgresStore {
    let options = PostgresOptions::default()
        .schema(schema)
        .clock(Arc::new(clock));
    PostgresStore::connect_with(TestServer::shared().url(), options)
        .await
        .unwrap()
}

/// The server's clock now, in unix ms.
async fn server_now(store: &PostgresStore) -> SystemTime {
    let client = store.connection_pool().get().await.unwrap();
    let row = client
        .query_one(
            "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint",
            &[],
        )
        .await
        .unwrap();
    from_unix_ms(row.get::<_, i64>(0) as u64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clocks_thirty_seconds_apart_never_over_issue_or_take_a_live_lease() {
    let schema = TestServer::fresh_schema();
    let fast = store(&schema, OffsetClock::ahead(OFF)).await;
    let slow = store(&schema, OffsetClock::behind(OFF)).await;
    // Each view corrects its machine's error: the server is 30 s behind the
    // fast machine and 30 s ahead of the slow one (to within a round trip).
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
