//! Cases for many tasks and for guards.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::{Fixture, SEC, until_in_use};
use crate::error::Error;

/// R10: 64 tasks borrowing from 4 slots with waits never hold more than 4
/// at once, and never share a position.
pub async fn r10_64_tasks_on_4_slots_never_over_issue(f: Fixture) {
    let pool = f.pool("p");
    pool.register(4).await.unwrap();
    let holding = Arc::new(AtomicU32::new(0));
    let by_position: Arc<[AtomicU32; 4]> = Arc::new(Default::default());
    let highest = Arc::new(AtomicU32::new(0));
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let (pool, holding, by_position, highest) = (
                pool.clone(),
                holding.clone(),
                by_position.clone(),
                highest.clone(),
            );
            tokio::spawn(async move {
                for _ in 0..10 {
                    let lease = pool.borrow(SEC * 60, SEC * 3600).await.unwrap();
                    let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                    highest.fetch_max(now, Ordering::SeqCst);
                    let slot = &by_position[lease.position as usize];
                    assert_eq!(slot.fetch_add(1, Ordering::SeqCst), 0, "position shared");
                    tokio::task::yield_now().await;
                    slot.fetch_sub(1, Ordering::SeqCst);
                    holding.fetch_sub(1, Ordering::SeqCst);
                    assert!(lease.release().await.unwrap(), "lease was still active");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let highest = highest.load(Ordering::SeqCst);
    assert!((1..=4).contains(&highest), "highest concurrency {highest}");
    // A slot a return handed to a place that was meanwhile served another
    // way is given back by that place's clean-up, which runs detached:
    // every slot comes back, not necessarily before this line.
    until_in_use(&pool, 0).await;
}

/// R13: dropping a guard returns its lease; a forgotten lease is kept until
/// its ttl.
pub async fn r13_guard_returns_on_drop_and_forget_keeps_until_ttl(f: Fixture) {
    let pool = f.pool("p");
    pool.register(2).await.unwrap();
    let guard = pool.borrow(SEC * 10, Duration::ZERO).await.unwrap();
    assert_eq!(pool.inspect().await.unwrap().in_use, 1);
    drop(guard);
    until_in_use(&pool, 0).await;

    let kept = pool
        .borrow(SEC * 10, Duration::ZERO)
        .await
        .unwrap()
        .forget();
    assert_eq!(pool.inspect().await.unwrap().in_use, 1);
    f.clock.advance(SEC * 10);
    assert_eq!(pool.inspect().await.unwrap().in_use, 0);
    assert!(!pool.return_lease(kept.id).await.unwrap());
}

/// R13: an owned guard moves into a spawned task and returns its lease when
/// that task drops it.
pub async fn r13_owned_guard_works_in_spawned_task(f: Fixture) {
    let pool = f.pool("p");
    pool.register(1).await.unwrap();
    let guard = pool.borrow_owned(SEC * 60, Duration::ZERO).await.unwrap();
    tokio::spawn(async move {
        assert_eq!(guard.position, 0);
        drop(guard);
    })
    .await
    .unwrap();
    until_in_use(&pool, 0).await;
    let again = pool.try_borrow(SEC).await;
    assert!(!matches!(again, Err(Error::Exhausted { .. })), "{again:?}");
}
