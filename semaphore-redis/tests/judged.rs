//! A borrow that finds room judges the pool (expired leases, lapsed
//! places, ended sessions) only when something may be due by the pool's
//! mark. A session closed cleanly before its end is counted, and so due at
//! once: its slot is the next one handed out (R6), not a higher free one,
//! although the session's end is still ahead.

use std::sync::Arc;
use std::time::Duration;

use semaphore_core::store::{BorrowRequest, Store, TryBorrow};
use semaphore_redis::redis;
use semaphore_redis::testing::TestServer;
use semaphore_redis::{LeaseId, ManualClock, Pool, PoolId, RedisOptions, RedisStore};

const TTL: Duration = Duration::from_secs(3600);

#[tokio::test]
async fn a_closed_sessions_slot_goes_before_a_higher_free_one() {
    // A manual clock: nothing falls due by time while the test runs.
    let clock = Arc::new(ManualClock::new());
    let options = RedisOptions::default()
        .prefix(TestServer::fresh_prefix())
        .restart_grace(Duration::ZERO)
        .manual_clock(clock);
    let url = TestServer::shared().url();
    let closing = Arc::new(
        RedisStore::connect_with(url, options.clone())
            .await
            .unwrap(),
    );
    let staying = Arc::new(RedisStore::connect_with(url, options).await.unwrap());
    let id = PoolId::random();
    let other = Pool::new(staying.clone(), id);
    other.register(3).await.unwrap();

    // Bound to the closing handle's session, through the store itself: a
    // guard would return it on drop, and a forgotten one is unbound.
    let session = closing.session().and_then(|s| s.current()).unwrap();
    let mut request = BorrowRequest::new(id, LeaseId::new(), TTL);
    request.session = Some(session);
    let bound = closing.try_borrow(&request).await.unwrap();
    assert!(matches!(bound, TryBorrow::Granted { lease, .. } if lease.position == 0));
    let kept = other.try_borrow(TTL).await.unwrap();
    assert_eq!(kept.position, 1);

    // A clean end: the session's key is deleted (and the close counted).
    drop(closing);
    let key = format!("{}:s:{}", staying.prefix(), session.as_uuid());
    let mut connection = staying.connection().clone();
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let exists: bool = redis::cmd("EXISTS")
                .arg(&key)
                .query_async(&mut connection)
                .await
                .unwrap();
            if !exists {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the dropped store never closed its session");

    let next = other.try_borrow(TTL).await.unwrap();
    assert_eq!(
        next.position, 0,
        "the closed session's slot, not position 2"
    );
}
