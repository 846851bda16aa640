//! A contended pool is asked with a place from the start: a waiting
//! borrower whose pool's last borrow here was refused at its first ask
//! asks the store once, with its place, before it waits, not once without
//! a place and once more with one. For stores that keep a shared queue.

use std::time::Duration;

use super::{Fixture, LosingStore, until_in_use, until_waiting};
use crate::{id::PoolId, pool::Pool};

const TTL: Duration = Duration::from_secs(3600);
const WAIT: Duration = Duration::from_secs(60);

/// A borrower that waits on a pool whose last borrow here was refused at
/// its first ask makes no attempt without a place; one that comes after a
/// borrow whose first ask was granted asks at once without one again.
pub async fn a_contended_pool_is_asked_with_a_place_from_the_start(f: Fixture) {
    let counting = LosingStore::new(f.store.clone());
    let pool = Pool::new(counting.clone(), PoolId::from_name("contended-first"));
    pool.register(1).await.unwrap();
    let held = pool.try_borrow(TTL).await.unwrap();
    // Refused at its first ask, made without a place (nothing was
    // contended here yet): it waits, and the pool is contended.
    let first = {
        let pool = pool.clone();
        tokio::spawn(async move { pool.borrow(TTL, WAIT).await.map(|g| g.forget()) })
    };
    // Refused and queued in the store: not only waiting here (a first ask
    // in flight counts as waiting, and may yet be granted).
    until_waiting(&pool, 1).await;
    while !pool.store().changes().head_has_asked(pool.id()) {
        tokio::task::yield_now().await;
    }
    drop(held);
    let first = first.await.unwrap().expect("the first waiter was served");

    let (before, placed) = (counting.unplaced(), counting.placed());
    let second = {
        let pool = pool.clone();
        tokio::spawn(async move { pool.borrow(TTL, WAIT).await.map(|g| g.forget()) })
    };
    // Its first ask answered (refused: the slot is held), it waits.
    while counting.placed() == placed {
        tokio::task::yield_now().await;
    }
    until_waiting(&pool, 1).await;
    assert!(pool.return_lease(first.id).await.unwrap());
    let second = second.await.unwrap().expect("the second waiter was served");
    assert_eq!(
        counting.unplaced(),
        before,
        "a borrow of a contended pool asked without its place"
    );

    // Its first ask was refused too; the next one, on a free slot, is
    // granted at its first ask (with a place), which ends the contention.
    assert!(pool.return_lease(second.id).await.unwrap());
    let granted = pool.borrow(TTL, WAIT).await.unwrap();
    assert_eq!(counting.unplaced(), before);
    drop(granted);
    until_in_use(&pool, 0).await;
    let at_once = pool.borrow(TTL, WAIT).await.unwrap();
    assert_eq!(
        counting.unplaced(),
        before + 1,
        "a borrow after an uncontended one asks at once without a place"
    );
    drop(at_once);
}
