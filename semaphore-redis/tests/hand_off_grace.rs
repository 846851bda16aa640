//! A head handed a slot just before a restart grace starts (a failover)
//! keeps looking while the grace lasts, and is refused (rule "Restart
//! grace"); its looks keep its place, so that once the grace ends it is
//! served before the head queued after it, however long the grace.

use std::sync::Arc;
use std::time::Duration;

use semaphore_core::store::{BorrowRequest, Store, TryBorrow, WaiterId};
use semaphore_redis::testing::TestServer;
use semaphore_redis::{LeaseId, ManualClock, PoolId, RedisOptions, RedisStore};

const TTL: Duration = Duration::from_secs(30);

async fn store(prefix: &str, clock: &Arc<ManualClock>) -> RedisStore {
    let options = RedisOptions::default()
        .prefix(prefix)
        .restart_grace(Duration::from_secs(60))
        .manual_clock(clock.clone());
    RedisStore::connect_with(TestServer::shared().url(), options)
        .await
        .expect("a Redis store on the test server")
}

async fn hset(store: &RedisStore, field: &str, value: &str) {
    let mut raw = store.connection().clone();
    let _: i64 = semaphore_redis::redis::cmd("HSET")
        .arg(format!("{}:run", store.prefix()))
        .arg(field)
        .arg(value)
        .query_async(&mut raw)
        .await
        .unwrap();
}

async fn queue(store: &RedisStore, pool: PoolId, waiter: WaiterId) {
    let mut request = BorrowRequest::new(pool, LeaseId::new(), TTL);
    request.waiter = Some(waiter);
    let answer = store.try_borrow(&request).await;
    assert!(
        matches!(answer, Ok(TryBorrow::Exhausted { .. })),
        "{answer:?}"
    );
}

async fn look(store: &RedisStore, pool: PoolId, waiter: WaiterId) -> TryBorrow {
    let mut request = BorrowRequest::new(pool, LeaseId::new(), TTL);
    request.waiter = Some(waiter);
    store.try_borrow(&request).await.unwrap()
}

#[tokio::test]
async fn a_head_handed_a_slot_keeps_its_place_through_a_restart_grace() {
    let clock = Arc::new(ManualClock::new());
    let prefix = TestServer::fresh_prefix();
    let (a, b) = (store(&prefix, &clock).await, store(&prefix, &clock).await);
    let pool = PoolId::random();
    a.register(pool, 1).await.unwrap();
    // No grace to begin with (the shared server may be young).
    hset(&a, "until", "0").await;
    let lease = LeaseId::new();
    let granted = a.try_borrow(&BorrowRequest::new(pool, lease, TTL)).await;
    assert!(
        matches!(granted, Ok(TryBorrow::Granted { .. })),
        "{granted:?}"
    );

    let (first, second) = (WaiterId::new(), WaiterId::new());
    queue(&b, pool, first).await;
    queue(&a, pool, second).await;
    assert!(a.return_lease(pool, lease).await.unwrap());
    assert_eq!(a.inspect(pool).await.unwrap().in_use, 1, "handed to first");

    // A failover: another run id; the next grant-side call starts a grace.
    hset(&a, "id", "another-run").await;
    // Both heads keep looking (every 2 s here; the poll looks every 1 s).
    for _ in 0..3 {
        clock.advance(Duration::from_secs(2));
        let f = look(&b, pool, first).await;
        assert!(
            matches!(f, TryBorrow::Exhausted { .. }),
            "first in grace: {f:?}"
        );
        let s = look(&a, pool, second).await;
        assert!(
            matches!(s, TryBorrow::Exhausted { .. }),
            "second in grace: {s:?}"
        );
    }
    let first_place = b.place(pool, first).await.unwrap();
    let second_place = a.place(pool, second).await.unwrap();
    // The grace ends.
    hset(&a, "until", "0").await;

    // The first head, which never stopped looking, is served first.
    let f = look(&b, pool, first).await;
    let s = look(&a, pool, second).await;
    assert!(
        matches!(f, TryBorrow::Granted { .. }) && matches!(s, TryBorrow::Exhausted { .. }),
        "after the grace: first {f:?} (place during grace {first_place:?}), \
         second {s:?} (place during grace {second_place:?})"
    );
}
