//! Cases for held places ([`Pool::wait_held`](crate::Pool::wait_held)):
//! a place in the store's queue that no process owns lives for its hold
//! after each poll (R11), is dropped after it (R12), and is granted only to
//! a poll. Run by
//! [`store_queue_conformance!`](crate::store_queue_conformance), for stores
//! that keep a queue.

use std::time::Duration;

use super::{Fixture, SEC};
use crate::store::{BorrowRequest, TryBorrow, WaiterId};
use crate::{BorrowOptions, LeaseId, PoolId};

const TTL: Duration = Duration::from_secs(60);
const HOLD: Duration = Duration::from_secs(20);
const LONG: Duration = Duration::from_secs(3600);

/// Asks `store` for one slot of `pool` as another process's queued head
/// `waiter` would: with the store's own waiter ttl.
async fn ask_as_head(
    store: &std::sync::Arc<dyn crate::Store>,
    pool: PoolId,
    waiter: WaiterId,
) -> TryBorrow {
    let mut request = BorrowRequest::new(pool, LeaseId::new(), TTL);
    request.waiter = Some(waiter);
    store.try_borrow(&request).await.unwrap()
}

/// A held place taken on a full pool keeps its place past the store's own
/// waiter ttl with nobody asking for it (a process's head would have been
/// dropped by then), is owed the slot a return frees (another head is
/// refused), and gets it at its next poll; a repeated poll gets the same
/// lease.
pub async fn r11_a_held_place_outlives_its_asker_within_its_hold(f: Fixture) {
    let pool = f.pool("held-kept");
    pool.register(1).await.unwrap();
    let held = take(&pool).await;
    let ticket = WaiterId::new();
    let first = pool.wait_held(ticket, HOLD, TTL, Duration::ZERO, BorrowOptions::new());
    assert!(first.await.unwrap().is_none(), "the pool is full");
    assert_eq!(pool.held_place(ticket).await.unwrap(), Some(1));
    // Longer than any store's own waiter ttl, shorter than the hold.
    f.clock.advance(HOLD - 5 * SEC);
    assert!(pool.return_lease(held.id).await.unwrap());
    let other = WaiterId::new();
    assert!(
        matches!(
            ask_as_head(&f.store, pool.id(), other).await,
            TryBorrow::Exhausted { .. }
        ),
        "a later head took the slot owed to the held place"
    );
    assert_eq!(pool.held_place(other).await.unwrap(), Some(2));
    assert_eq!(
        pool.inspect().await.unwrap().in_use,
        0,
        "no return hands a held place a slot"
    );
    let lease = pool
        .wait_held(ticket, HOLD, TTL, Duration::ZERO, BorrowOptions::new())
        .await
        .unwrap()
        .expect("the held place is served first")
        .forget();
    assert_eq!(lease.position, 0);
    assert_eq!(
        pool.held_place(ticket).await.unwrap(),
        None,
        "granted: no place"
    );
    let again = pool
        .wait_held(ticket, HOLD, TTL, Duration::ZERO, BorrowOptions::new())
        .await
        .unwrap()
        .expect("a repeated poll")
        .forget();
    assert_eq!(again.id, lease.id, "a repeated poll gets the same lease");
    f.store.leave_queue(pool.id(), other).await.unwrap();
}

/// A held place not polled within its hold is dropped: the head behind it
/// is served.
pub async fn r12_a_held_place_not_polled_within_its_hold_is_dropped(f: Fixture) {
    let pool = f.pool("held-dropped");
    pool.register(1).await.unwrap();
    let held = take(&pool).await;
    let ticket = WaiterId::new();
    let first = pool.wait_held(ticket, HOLD, TTL, Duration::ZERO, BorrowOptions::new());
    assert!(first.await.unwrap().is_none(), "the pool is full");
    assert!(pool.return_lease(held.id).await.unwrap());
    let other = WaiterId::new();
    assert!(matches!(
        ask_as_head(&f.store, pool.id(), other).await,
        TryBorrow::Exhausted { .. }
    ));
    f.clock.advance(HOLD + SEC);
    assert_eq!(pool.held_place(ticket).await.unwrap(), None, "dropped");
    assert!(
        matches!(
            ask_as_head(&f.store, pool.id(), other).await,
            TryBorrow::Granted { .. }
        ),
        "the abandoned place still held the slot"
    );
}

/// Places count from the head, held places and heads alike; a place that
/// leaves lets the ones behind it move up, and a poll that waits is
/// granted when a slot is returned.
pub async fn r11_held_places_know_their_place_and_are_woken_by_a_return(f: Fixture) {
    let pool = f.pool("held-places");
    pool.register(1).await.unwrap();
    let held = take(&pool).await;
    let (one, two) = (WaiterId::new(), WaiterId::new());
    for ticket in [one, two] {
        let poll = pool.wait_held(ticket, HOLD, TTL, Duration::ZERO, BorrowOptions::new());
        assert!(poll.await.unwrap().is_none());
    }
    assert_eq!(pool.held_place(one).await.unwrap(), Some(1));
    assert_eq!(pool.held_place(two).await.unwrap(), Some(2));
    pool.leave_held(one).await.unwrap();
    assert_eq!(pool.held_place(one).await.unwrap(), None);
    assert_eq!(pool.held_place(two).await.unwrap(), Some(1), "moved up");
    let waiting = {
        let pool = pool.clone();
        tokio::spawn(async move {
            pool.wait_held(
                two,
                HOLD,
                TTL,
                LONG,
                BorrowOptions::new().owner("ticket-two"),
            )
            .await
            .map(|g| g.map(|g| g.forget()))
        })
    };
    while !pool.store().changes().has_waiters() {
        tokio::task::yield_now().await;
    }
    assert!(pool.return_lease(held.id).await.unwrap());
    let lease = waiting.await.unwrap().unwrap().expect("granted");
    let holders = pool.holders().await.unwrap();
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].lease.id, lease.id);
    assert_eq!(holders[0].owner.as_deref(), Some("ticket-two"));
}

async fn take(pool: &crate::Pool) -> crate::Lease {
    pool.try_borrow(TTL).await.unwrap().forget()
}
