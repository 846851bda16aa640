//! Poll-level tests of the wait engine on `MemoryStore`: who is woken, and
//! when. Futures are polled by hand with `tokio_test`, so
//! every interleaving is fixed.

use std::sync::Arc;
use std::time::Duration;

use semaphore_memory::{Error, ManualClock, MemoryStore, Pool, PoolId};
use tokio_test::task::spawn;
use tokio_test::{assert_pending, assert_ready, assert_ready_ok};

const TTL: Duration = Duration::from_secs(60);
const WAIT: Duration = Duration::from_secs(60);

async fn one_slot_pool() -> Pool {
    let store = Arc::new(MemoryStore::with_clock(Arc::new(ManualClock::new())));
    let pool = Pool::new(store, PoolId::from_name("poll"));
    pool.register(1).await.unwrap();
    pool
}

/// A return hands the slot to the head in its own step (the head's poll
/// finds the lease and asks nothing), and wakes the new head once, with the
/// pool's next expiry, so that it can set its timer without asking either.
#[tokio::test]
async fn return_hands_the_slot_to_the_head_and_tells_the_next_its_expiry() {
    let pool = one_slot_pool().await;
    let held = pool.try_borrow(TTL).await.unwrap().forget();

    let mut head = spawn(pool.borrow(TTL, WAIT));
    let mut second = spawn(pool.borrow(TTL, WAIT));
    assert_pending!(head.poll());
    assert_pending!(second.poll());
    assert_eq!(pool.waiting().count, 2);

    assert!(pool.return_lease(held.id).await.unwrap());
    assert!(head.is_woken(), "the head is woken by the return");
    assert_eq!(pool.waiting().count, 1, "with the slot: it left the queue");
    assert_eq!(pool.inspect().await.unwrap().in_use, 1);
    assert!(second.is_woken(), "the new head is told the next expiry");

    assert_pending!(second.poll());
    assert!(
        !second.is_woken(),
        "then sleeps until a change or that expiry"
    );
    let lease = assert_ready_ok!(head.poll());
    assert_eq!(lease.position, 0);
    assert!(!second.is_woken(), "the head taking its lease wakes no one");

    drop(lease);
    assert!(second.is_woken(), "the next return hands it the slot");
    assert_eq!(assert_ready_ok!(second.poll()).position, 0);
}

/// The lost wake-up this pins: a head that got its place when the one
/// ahead took the last slot never asked the store, so it had no expiry
/// timer and slept through the expiry that freed its slot.
#[tokio::test]
async fn new_head_after_a_grant_wakes_at_the_granted_lease_expiry() {
    let clock = Arc::new(ManualClock::new());
    let store = Arc::new(MemoryStore::with_clock(clock.clone()));
    let pool = Pool::new(store, PoolId::from_name("poll"));
    pool.register(1).await.unwrap();
    let held = pool.try_borrow(TTL).await.unwrap().forget();
    let mut head = spawn(pool.borrow(Duration::from_secs(5), WAIT));
    let mut second = spawn(pool.borrow(TTL, WAIT));
    assert_pending!(head.poll());
    assert_pending!(second.poll());
    pool.return_lease(held.id).await.unwrap();
    let _short = assert_ready_ok!(head.poll()).forget();
    assert_pending!(second.poll());
    clock.advance(Duration::from_secs(5));
    tokio::task::yield_now().await;
    assert!(second.is_woken(), "woken by the expiry of the head's lease");
    assert_eq!(assert_ready_ok!(second.poll()).position, 0);
}

#[tokio::test]
async fn dropping_the_head_hands_the_turn_to_the_next() {
    let pool = one_slot_pool().await;
    let held = pool.try_borrow(TTL).await.unwrap().forget();
    let mut head = spawn(pool.borrow(TTL, WAIT));
    let mut second = spawn(pool.borrow(TTL, WAIT));
    assert_pending!(head.poll());
    assert_pending!(second.poll());

    drop(head);
    assert_eq!(pool.waiting().count, 1);
    assert!(
        second.is_woken(),
        "the new head gets its turn to ask the store"
    );
    assert_pending!(second.poll());

    pool.return_lease(held.id).await.unwrap();
    assert!(second.is_woken());
    assert_eq!(assert_ready_ok!(second.poll()).position, 0);
}

#[tokio::test]
async fn count_raise_lets_every_waiter_in_that_fits() {
    let pool = one_slot_pool().await;
    let _held = pool.try_borrow(TTL).await.unwrap();
    let mut a = spawn(pool.borrow(TTL, WAIT));
    let mut b = spawn(pool.borrow(TTL, WAIT));
    let mut c = spawn(pool.borrow(TTL, WAIT));
    for t in [&mut a, &mut b, &mut c] {
        assert_pending!(t.poll());
    }
    pool.register(3).await.unwrap();
    assert!(a.is_woken() && !b.is_woken());
    let got_a = assert_ready_ok!(a.poll());
    assert_eq!(got_a.position, 1);
    assert!(
        b.is_woken(),
        "a grant that left a slot free passes the turn on"
    );
    let got_b = assert_ready_ok!(b.poll());
    assert_eq!(got_b.position, 2);
    assert!(c.is_woken(), "the new head asks once");
    assert_pending!(c.poll());
    assert!(!c.is_woken(), "the pool is full again: the third sleeps on");
    drop(got_a);
    assert!(c.is_woken());
    assert_eq!(assert_ready_ok!(c.poll()).position, 1);
}

#[tokio::test]
async fn delete_fails_the_whole_queue_without_a_clock_move() {
    let pool = one_slot_pool().await;
    let _held = pool.try_borrow(TTL).await.unwrap();
    let mut a = spawn(pool.borrow(TTL, WAIT));
    let mut b = spawn(pool.borrow(TTL, WAIT));
    assert_pending!(a.poll());
    assert_pending!(b.poll());
    pool.delete().await.unwrap();
    assert!(matches!(
        assert_ready!(a.poll()),
        Err(Error::PoolNotFound { .. })
    ));
    assert!(b.is_woken());
    assert!(matches!(
        assert_ready!(b.poll()),
        Err(Error::PoolNotFound { .. })
    ));
}
