//! A pool with more queued places than Lua unpacks at once (about 8000:
//! held places, `HeldPlace::wait` (`pool.held(id)`), are tickets any number of clients may
//! take) still answers every borrow: the store reads the heads' weights
//! in chunks.

use std::time::Duration;

use semaphore_core::store::{BorrowRequest, Store, TryBorrow, WaiterId};
use semaphore_redis::testing::TestServer;
use semaphore_redis::{LeaseId, PoolId, RedisOptions, RedisStore};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_thousand_held_places_do_not_break_the_pool() {
    // Each place's call reads every place before it (O(n) in the server,
    // by design), and 200 are sent at once: the last of a batch waits
    // behind 199 such scripts, seconds on a loaded 2-core machine. What this
    // test checks is the answer, not its latency: no response timeout.
    let options = RedisOptions::default()
        .prefix(TestServer::fresh_prefix())
        .restart_grace(Duration::ZERO)
        .response_timeout(Duration::from_secs(120));
    let store = RedisStore::connect_with(TestServer::shared().url(), options)
        .await
        .unwrap();
    let pool = PoolId::random();
    store.register(pool, 1).await.unwrap();
    let held = store
        .try_borrow(&BorrowRequest::new(
            pool,
            LeaseId::new(),
            Duration::from_secs(600),
        ))
        .await
        .unwrap();
    assert!(matches!(held, TryBorrow::Granted { .. }));

    // Held places, as `HeldPlace::wait` takes them (a waiter, a hold, a key).
    let place = |i: usize| {
        let mut request = BorrowRequest::new(pool, LeaseId::new(), Duration::from_secs(60));
        request.waiter = Some(WaiterId::new());
        request.hold = Some(Duration::from_secs(600));
        request.key = Some(format!("ticket-{i}").into());
        request
    };
    let mut queued = 0;
    for batch in 0..41 {
        let requests: Vec<_> = (0..200).map(|i| place(batch * 200 + i)).collect();
        let answers =
            futures_util::future::join_all(requests.iter().map(|r| store.try_borrow(r))).await;
        for answer in answers {
            match answer {
                Ok(TryBorrow::Exhausted { .. }) => queued += 1,
                other => panic!("held place {queued} + 1 answered {other:?}"),
            }
        }
    }
    // A plain borrower of the pool.
    let plain = store
        .try_borrow(&BorrowRequest::new(
            pool,
            LeaseId::new(),
            Duration::from_secs(1),
        ))
        .await;
    assert!(
        matches!(plain, Ok(TryBorrow::Exhausted { .. })),
        "{plain:?}"
    );
}
