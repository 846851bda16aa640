//! Cases for borrowing from several pools at once, all or nothing (rule
//! "Beyond the basic model").

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::{Fixture, SEC, spawn_borrow, until_in_use, until_waiting};
use crate::{error::Error, pool::Pool, set::PoolSet};

const LONG: Duration = Duration::from_secs(3600);

async fn pools(f: &Fixture, counts: &[u32]) -> Vec<Pool> {
    let mut out = Vec::new();
    for (i, count) in counts.iter().enumerate() {
        let pool = f.pool(&format!("pool-{i}"));
        pool.register(*count).await.unwrap();
        out.push(pool);
    }
    out
}

/// One slot of each pool, in the set's order; dropping the set returns all.
pub async fn borrow_all_grants_one_slot_of_each_in_order(f: Fixture) {
    let p = pools(&f, &[1, 3, 2]).await;
    let set = PoolSet::new(p.clone()).unwrap();
    let leases = set.borrow(SEC * 60, Duration::ZERO).await.unwrap();
    let pools_of: Vec<_> = leases.iter().map(|l| l.pool).collect();
    assert_eq!(pools_of, set.ids());
    assert!(leases.windows(2).all(|w| w[0].token < w[1].token));
    for pool in &p {
        assert_eq!(pool.inspect().await.unwrap().in_use, 1);
    }
    drop(leases);
    for pool in &p {
        until_in_use(pool, 0).await;
    }
}

/// All or nothing: with one pool full, nothing is taken from the others;
/// an unknown pool fails at once and takes nothing either.
pub async fn borrow_all_takes_nothing_unless_it_takes_all(f: Fixture) {
    let p = pools(&f, &[2, 1]).await;
    let _full = p[1].borrow(SEC * 60, Duration::ZERO).await.unwrap();
    let set = PoolSet::new(p.clone()).unwrap();
    let err = set.borrow(SEC, Duration::ZERO).await.unwrap_err();
    assert!(matches!(err, Error::Exhausted { .. }), "{err:?}");
    assert_eq!(p[0].inspect().await.unwrap().in_use, 0);

    let with_unknown = PoolSet::new([p[0].clone(), f.pool("never-registered")]).unwrap();
    let err = with_unknown.borrow(SEC, LONG).await.unwrap_err();
    assert!(matches!(err, Error::PoolNotFound { .. }), "{err:?}");
    assert_eq!(p[0].inspect().await.unwrap().in_use, 0);
}

/// A set borrower waits until every pool has a slot, under one deadline,
/// and then takes them together.
pub async fn borrow_all_waits_for_the_last_pool_under_one_deadline(f: Fixture) {
    let p = pools(&f, &[1, 1]).await;
    let a = p[0]
        .borrow(SEC * 60, Duration::ZERO)
        .await
        .unwrap()
        .forget();
    let b = p[1]
        .borrow(SEC * 60, Duration::ZERO)
        .await
        .unwrap()
        .forget();
    let set = PoolSet::new(p.clone()).unwrap();
    let waiter = {
        let set = set.clone();
        tokio::spawn(async move { set.borrow(SEC * 60, SEC * 10).await.map(|l| l.forget()) })
    };
    until_waiting(&p[0], 1).await;
    assert!(p[0].return_lease(a.id).await.unwrap());
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    assert!(!waiter.is_finished(), "granted with pool 1 still full");
    assert_eq!(p[0].inspect().await.unwrap().in_use, 0, "held a part");
    assert!(p[1].return_lease(b.id).await.unwrap());
    let leases = waiter.await.unwrap().unwrap();
    assert_eq!(leases.len(), 2);

    let late = tokio::spawn(async move { set.borrow(SEC, SEC * 10).await.map(|l| l.forget()) });
    until_waiting(&p[0], 1).await;
    f.clock.advance(SEC * 10);
    let err = late.await.unwrap().unwrap_err();
    assert!(
        matches!(err, Error::Exhausted { waited, .. } if waited == SEC * 10),
        "{err:?}"
    );
}

/// A dropped set borrower leaves every queue, and the borrowers behind it
/// are served.
pub async fn borrow_all_dropped_leaves_every_queue(f: Fixture) {
    let p = pools(&f, &[1, 1]).await;
    let held = p[1]
        .borrow(SEC * 60, Duration::ZERO)
        .await
        .unwrap()
        .forget();
    let set = PoolSet::new(p.clone()).unwrap();
    let waiter = tokio::spawn(async move { set.borrow(SEC, LONG).await.map(|l| l.forget()) });
    until_waiting(&p[1], 1).await;
    let behind = spawn_borrow(&p[1], SEC, LONG);
    until_waiting(&p[1], 2).await;
    waiter.abort();
    until_waiting(&p[0], 0).await;
    until_waiting(&p[1], 1).await;
    assert!(p[1].return_lease(held.id).await.unwrap());
    assert_eq!(behind.await.unwrap().unwrap().position, 0);
    // Nothing of the dropped set stays held. A store that takes pools on
    // several servers one after another (Redis Cluster's check, then take)
    // may hold the first for a round trip before it gives it back; the
    // manual clock stands still, so only a give-back frees it.
    until_in_use(&p[0], 0).await;
}

/// Sets that are empty or name a pool twice are refused.
pub async fn pool_set_refuses_no_pools_and_duplicates(f: Fixture) {
    let p = pools(&f, &[1]).await;
    for set in [PoolSet::new([]), PoolSet::new([p[0].clone(), p[0].clone()])] {
        match set {
            Err(Error::InvalidArgument { field: "pools", .. }) => {}
            other => panic!("expected InvalidArgument naming pools, got {other:?}"),
        }
    }
}

/// Two tasks borrowing pools {A, B} and {B, A} 1,000 times each, with one
/// slot per pool, finish without deadlock and never hold a pool twice.
pub async fn borrow_all_in_opposite_orders_never_deadlocks_or_over_issues(f: Fixture) {
    let p = pools(&f, &[1, 1]).await;
    let holding: Arc<[AtomicU32; 2]> = Arc::new(Default::default());
    let tasks: Vec<_> = [[0, 1], [1, 0]]
        .into_iter()
        .map(|order| {
            let set = PoolSet::new(order.map(|i| p[i].clone())).unwrap();
            let holding = holding.clone();
            tokio::spawn(async move {
                for _ in 0..1000 {
                    let leases = set.borrow(SEC * 60, LONG).await.unwrap();
                    for &i in &order {
                        let was = holding[i].fetch_add(1, Ordering::SeqCst);
                        assert_eq!(was, 0, "pool {i} over-issued");
                    }
                    tokio::task::yield_now().await;
                    for &i in &order {
                        holding[i].fetch_sub(1, Ordering::SeqCst);
                    }
                    assert!(leases.release().await.unwrap());
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    for pool in &p {
        assert_eq!(pool.inspect().await.unwrap().in_use, 0);
    }
}
