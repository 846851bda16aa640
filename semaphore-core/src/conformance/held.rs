//! Cases for held places ([`HeldPlace::wait`](crate::HeldPlace::wait)):
//! a place in the store's queue that no process owns lives for its hold
//! after each poll, is dropped after it, is granted only to a
//! poll, and is served in its turn with every borrower queued. Run by
//! [`store_conformance!`](crate::store_conformance), on every store.

use std::time::Duration;

use super::{Fixture, SEC, spawn_borrow, until_waiting};
use crate::store::WaiterId;
use crate::{error::Error, options::BorrowOptions};

const TTL: Duration = Duration::from_secs(60);
const HOLD: Duration = Duration::from_secs(20);
const LONG: Duration = Duration::from_secs(3600);

/// A held place taken on a full pool keeps its place past the store's own
/// waiter ttl with nobody asking for it (a process's head would have been
/// dropped by then), is owed the slot a return frees (a newcomer and a
/// borrower queued after it are refused), and gets it at its next poll; a
/// repeated poll gets the same lease.
pub async fn r11_a_held_place_outlives_its_asker_within_its_hold(f: Fixture) {
    let pool = f.pool("held-kept");
    pool.register(1).await.unwrap();
    let held = take(&pool).await;
    let ticket = WaiterId::new();
    let first = pool
        .held(ticket)
        .wait(HOLD, TTL, Duration::ZERO, BorrowOptions::new());
    assert!(first.await.unwrap().is_none(), "the pool is full");
    assert_eq!(pool.held(ticket).place().await.unwrap(), Some(1));
    let later = spawn_borrow(&pool, TTL, LONG);
    until_waiting(&pool, 1).await;
    // Longer than any store's own waiter ttl, shorter than the hold.
    f.clock.advance(HOLD - 5 * SEC);
    assert!(pool.return_lease(held.id).await.unwrap());
    assert!(
        matches!(
            pool.try_borrow(TTL).await.map(|g| g.forget()),
            Err(Error::Exhausted { .. })
        ),
        "a newcomer took the slot owed to the held place"
    );
    let lease = pool
        .held(ticket)
        .wait(HOLD, TTL, Duration::ZERO, BorrowOptions::new())
        .await
        .unwrap()
        .expect("the held place is served first")
        .forget();
    assert_eq!(lease.position, 0);
    assert_eq!(
        pool.held(ticket).place().await.unwrap(),
        None,
        "granted: no place"
    );
    let again = pool
        .held(ticket)
        .wait(HOLD, TTL, Duration::ZERO, BorrowOptions::new())
        .await
        .unwrap()
        .expect("a repeated poll")
        .forget();
    assert_eq!(again.id, lease.id, "a repeated poll gets the same lease");
    assert!(pool.return_lease(lease.id).await.unwrap());
    let next = later.await.unwrap().expect("the borrower queued after it");
    assert_eq!(next.position, 0);
}

/// A held place not polled within its hold is dropped: a newcomer is
/// served.
pub async fn r12_a_held_place_not_polled_within_its_hold_is_dropped(f: Fixture) {
    let pool = f.pool("held-dropped");
    pool.register(1).await.unwrap();
    let held = take(&pool).await;
    let ticket = WaiterId::new();
    let first = pool
        .held(ticket)
        .wait(HOLD, TTL, Duration::ZERO, BorrowOptions::new());
    assert!(first.await.unwrap().is_none(), "the pool is full");
    assert!(pool.return_lease(held.id).await.unwrap());
    assert!(matches!(
        pool.try_borrow(TTL).await.map(|g| g.forget()),
        Err(Error::Exhausted { .. })
    ));
    f.clock.advance(HOLD + SEC);
    assert_eq!(pool.held(ticket).place().await.unwrap(), None, "dropped");
    let lease = pool
        .try_borrow(TTL)
        .await
        .expect("the abandoned place still held the slot")
        .forget();
    assert_eq!(lease.position, 0);
}

/// A held place taken while a borrower waits queued is behind it: it
/// counts it in its place, and the slot a return frees goes to that
/// borrower; the place is served at the next return.
pub async fn r11_a_held_place_waits_behind_borrowers_queued_before_it(f: Fixture) {
    let pool = f.pool("held-behind");
    pool.register(1).await.unwrap();
    let held = take(&pool).await;
    let earlier = spawn_borrow(&pool, TTL, LONG);
    // Queued, and known to the store's queue as a head.
    while !pool.store().changes().head_has_asked(pool.id()) {
        tokio::task::yield_now().await;
    }
    let ticket = WaiterId::new();
    let first = pool
        .held(ticket)
        .wait(HOLD, TTL, Duration::ZERO, BorrowOptions::new());
    assert!(first.await.unwrap().is_none(), "the pool is full");
    assert_eq!(pool.held(ticket).place().await.unwrap(), Some(2));
    assert!(pool.return_lease(held.id).await.unwrap());
    let lease = earlier.await.unwrap().expect("the borrower queued first");
    let poll = pool
        .held(ticket)
        .wait(HOLD, TTL, Duration::ZERO, BorrowOptions::new());
    assert!(poll.await.unwrap().is_none(), "served before its turn");
    assert_eq!(pool.held(ticket).place().await.unwrap(), Some(1));
    assert!(pool.return_lease(lease.id).await.unwrap());
    let poll = pool
        .held(ticket)
        .wait(HOLD, TTL, LONG, BorrowOptions::new());
    assert_eq!(poll.await.unwrap().expect("its turn").forget().position, 0);
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
        let poll = pool
            .held(ticket)
            .wait(HOLD, TTL, Duration::ZERO, BorrowOptions::new());
        assert!(poll.await.unwrap().is_none());
    }
    assert_eq!(pool.held(one).place().await.unwrap(), Some(1));
    assert_eq!(pool.held(two).place().await.unwrap(), Some(2));
    pool.held(one).leave().await.unwrap();
    assert_eq!(pool.held(one).place().await.unwrap(), None);
    assert_eq!(pool.held(two).place().await.unwrap(), Some(1), "moved up");
    let waiting = {
        let pool = pool.clone();
        tokio::spawn(async move {
            pool.held(two)
                .wait(HOLD, TTL, LONG, BorrowOptions::new().owner("ticket-two"))
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

/// R15: a held place for more slots than the pool's count keeps
/// its place but holds back no one while the count is below its weight:
/// borrowers that come after it are granted, even with no wait. Once the
/// count is raised to its weight, it is owed the slots before anyone who
/// came after it.
pub async fn r15_a_held_place_for_more_slots_than_the_count_holds_back_no_one(f: Fixture) {
    let pool = f.pool("held-heavy");
    pool.register(4).await.unwrap();
    let ticket = WaiterId::new();
    let five = || BorrowOptions::new().slots(5);
    let first = pool.held(ticket).wait(HOLD, TTL, Duration::ZERO, five());
    assert!(first.await.unwrap().is_none(), "5 slots of 4");
    assert_eq!(pool.held(ticket).place().await.unwrap(), Some(1));
    let one = pool
        .try_borrow(TTL)
        .await
        .expect("a place for more slots than the count held back a borrower")
        .forget();
    let poll = pool.held(ticket).wait(HOLD, TTL, Duration::ZERO, five());
    assert!(poll.await.unwrap().is_none(), "still 5 slots of 4");
    assert_eq!(pool.held(ticket).place().await.unwrap(), Some(1), "kept");
    let two = pool
        .borrow(TTL, LONG)
        .await
        .expect("not held back")
        .forget();
    assert_eq!((one.position, two.position), (0, 1));
    // Raised to its weight: the place is owed every slot.
    pool.register(5).await.unwrap();
    assert!(pool.return_lease(one.id).await.unwrap());
    assert!(pool.return_lease(two.id).await.unwrap());
    assert!(
        matches!(
            pool.try_borrow(TTL).await.map(|g| g.forget()),
            Err(Error::Exhausted { .. })
        ),
        "a newcomer took a slot owed to the place raised to its weight"
    );
    let lease = pool
        .held(ticket)
        .wait(HOLD, TTL, Duration::ZERO, five())
        .await
        .unwrap()
        .expect("served once the count is its weight")
        .forget();
    assert_eq!(&lease.positions[..], &[0, 1, 2, 3, 4]);
}

async fn take(pool: &crate::pool::Pool) -> crate::lease::Lease {
    pool.try_borrow(TTL).await.unwrap().forget()
}

/// A held place that waits while its pool drains
/// ([`BorrowOptions::wait_while_draining`]) takes a real place while the
/// pool drains, behind the places taken before it, and keeps it through
/// the drain: once the drain ends, the earlier place is served first and
/// then this one. (The HTTP service's tickets enqueued on a draining pool
/// answered place 1 and then were unknown at every poll: the store wrote
/// no place.) One that does not wait for the drain leaves no place.
pub async fn r11_a_held_place_keeps_its_turn_through_a_drain(f: Fixture) {
    let pool = f.pool("held-drain");
    pool.register(1).await.unwrap();
    let held = take(&pool).await;
    let waits = BorrowOptions::new().wait_while_draining(true);
    let (earlier, later, gone) = (WaiterId::new(), WaiterId::new(), WaiterId::new());
    let poll = |ticket: WaiterId, options: BorrowOptions| {
        let pool = pool.clone();
        async move {
            pool.held(ticket)
                .wait(HOLD, TTL, Duration::ZERO, options)
                .await
        }
    };
    assert!(poll(earlier, waits.clone()).await.unwrap().is_none());
    pool.set_draining(true).await.unwrap();
    assert!(
        poll(later, waits.clone()).await.unwrap().is_none(),
        "not granted while the pool drains"
    );
    assert_eq!(
        pool.held(later).place().await.unwrap(),
        Some(2),
        "a real place, behind the earlier one"
    );
    assert!(matches!(
        poll(gone, BorrowOptions::new()).await,
        Err(Error::Draining { .. })
    ));
    assert_eq!(
        pool.held(gone).place().await.unwrap(),
        None,
        "no place left"
    );
    // Polled through the drain: the places are kept.
    f.clock.advance(HOLD / 2);
    assert!(poll(earlier, waits.clone()).await.unwrap().is_none());
    assert!(poll(later, waits.clone()).await.unwrap().is_none());
    assert_eq!(pool.held(later).place().await.unwrap(), Some(2));
    pool.set_draining(false).await.unwrap();
    assert!(pool.return_lease(held.id).await.unwrap());
    assert!(
        poll(later, waits.clone()).await.unwrap().is_none(),
        "the later place does not jump the earlier one"
    );
    let first = poll(earlier, waits.clone())
        .await
        .unwrap()
        .expect("served first")
        .forget();
    assert!(pool.return_lease(first.id).await.unwrap());
    let second = poll(later, waits)
        .await
        .unwrap()
        .expect("then the later one");
    assert_eq!(second.position, 0);
}

/// Who waits, as the store and the pool show it: the store counts its
/// places ([`PoolState::queued`](crate::PoolState::queued): here, two
/// held places) and lists them in line with their weight and the instant
/// each was taken ([`Store::queue`](crate::store::Store::queue)); the
/// pool's view adds this process's borrowers once each (its queued head's
/// place in the store is not counted twice), sorted first come first; and
/// a served or dropped place leaves both.
pub async fn held_places_are_counted_and_listed_with_their_wait(f: Fixture) {
    use crate::queued::PlaceKind;
    let pool = f.pool("held-listed");
    pool.register(1).await.unwrap();
    let held = take(&pool).await;
    let taken = f.store.clock().now();
    let (first, second) = (WaiterId::new(), WaiterId::new());
    let poll = |ticket: WaiterId, slots: u32| {
        let pool = pool.clone();
        async move {
            pool.held(ticket)
                .wait(HOLD, TTL, Duration::ZERO, BorrowOptions::new().slots(slots))
                .await
        }
    };
    assert!(poll(first, 1).await.unwrap().is_none());
    f.clock.advance(SEC);
    assert!(poll(second, 1).await.unwrap().is_none());
    let state = pool.inspect().await.unwrap();
    assert_eq!(state.queued, 2, "two held places");
    let kept = pool.store().queue(pool.id()).await.unwrap();
    assert_eq!(
        kept.iter()
            .map(|p| (p.waiter, p.slots, p.kind))
            .collect::<Vec<_>>(),
        vec![
            (Some(first), 1, PlaceKind::Held),
            (Some(second), 1, PlaceKind::Held)
        ],
        "in line"
    );
    let since = |p: &crate::QueuedPlace| {
        crate::store::unix_ms(p.since) / 1000 - crate::store::unix_ms(taken) / 1000
    };
    assert_eq!(
        (since(&kept[0]), since(&kept[1])),
        (0, 1),
        "when each was taken"
    );
    // A borrower of this process, behind them.
    f.clock.advance(SEC);
    let later = spawn_borrow(&pool, TTL, LONG);
    until_waiting(&pool, 1).await;
    f.clock.advance(SEC);
    let everyone = pool.queue().await.unwrap();
    assert_eq!(
        everyone.iter().map(|p| p.kind).collect::<Vec<_>>(),
        vec![PlaceKind::Held, PlaceKind::Held, PlaceKind::Here],
        "{everyone:?}"
    );
    let state = pool.inspect().await.unwrap();
    let waiting = pool
        .waiting_everywhere(&state, f.store.clock().now())
        .await
        .unwrap();
    assert_eq!(waiting.count, 3);
    assert_eq!(
        waiting.longest.map(|d| d.as_secs()),
        Some(3),
        "the first ticket's wait"
    );
    // Served, left: out of line.
    pool.held(second).leave().await.unwrap();
    assert!(pool.return_lease(held.id).await.unwrap());
    let lease = poll(first, 1)
        .await
        .unwrap()
        .expect("the first place is served")
        .forget();
    assert!(pool.return_lease(lease.id).await.unwrap());
    let next = later.await.unwrap().unwrap();
    assert_eq!(pool.inspect().await.unwrap().queued, 0);
    assert!(pool.queue().await.unwrap().is_empty());
    assert!(pool.return_lease(next.id).await.unwrap());
}
