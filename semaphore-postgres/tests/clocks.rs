//! Machines whose clocks disagree, on one database (issue 12; SPEC "Time",
//! R7, R10): two stores whose process clocks are 30 s ahead and 30 s behind.
//! The server's clock decides, so neither can take a live lease or write
//! one already expired; each times its waits by its view of the server's
//! clock, corrected by the offset it measured.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use semaphore_core::conformance::OffsetClock;
use semaphore_postgres::store::from_unix_ms;
use semaphore_postgres::testing::TestServer;
use semaphore_postgres::{Error, Pool, PoolId, PostgresOptions, PostgresStore};

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
    let on_fast = Pool::new(fast.clone(), id);
    let on_slow = Pool::new(slow.clone(), id);
    on_fast.register(1).await.unwrap();

    // A lease taken by the slow machine is not born expired...
    let held = on_slow.try_borrow(Duration::from_secs(20)).await.unwrap();
    let now = server_now(&slow).await;
    assert!(
        held.expires_at > now,
        "the slow machine wrote an expired lease"
    );
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
