//! Cases where a change lands while a borrower's store call or count read
//! is in flight, each held at a [`GatedStore`]'s gate.
//! A hostile review found each of them; each failed on the memory
//! store before its fix.

use std::sync::Arc;
use std::time::Duration;

use super::gate::{GatedStore, Stop};
use super::{Fixture, SEC, until_waiting};
use crate::{
    error::Error, error::Result, id::PoolId, lease::Lease, options::BorrowOptions, pool::Pool,
    set::PoolSet,
};

const TTL: Duration = Duration::from_secs(60);
const LONG: Duration = Duration::from_secs(3600);
/// A bound on a wait that must end: a hang fails here, not at the case's
/// 60 s guard.
const BOUND: Duration = Duration::from_secs(10);

fn spawn_borrow_n(pool: &Pool, n: u32) -> tokio::task::JoinHandle<Result<Lease>> {
    let pool = pool.clone();
    tokio::spawn(async move {
        pool.borrow_with(TTL, LONG, BorrowOptions::new().slots(n))
            .await
            .map(|g| g.forget())
    })
}

/// Lets spawned tasks run what they can.
async fn settle() {
    for _ in 0..200 {
        tokio::task::yield_now().await;
    }
}

/// R15: a count read while an earlier queue of the pool stood
/// is not applied to the queue made after it. A borrower of 2 reads the
/// count (2, held at the gate); the count is raised to 4 and a return
/// serves it, which empties the queue. A borrower of 3 then queues anew
/// and reads 4. The first read, landing now, must not set the second
/// borrower aside: it is neither overtaken by a later borrower nor left
/// asleep when the slots it waits for come free.
pub async fn r15_a_count_read_on_a_removed_queue_does_not_weigh_the_next(f: Fixture) {
    let (first_gate, second_gate) = (
        Arc::new(GatedStore::new(f.store.clone())),
        Arc::new(GatedStore::new(f.store.clone())),
    );
    let id = PoolId::from_name("p");
    let plain = Pool::new(f.store.clone(), id);
    plain.register(2).await.unwrap();
    let held = plain.borrow(TTL, Duration::ZERO).await.unwrap().forget();
    first_gate.arm_keeping_hand_offs(Stop::AfterInspect);
    let two = spawn_borrow_n(&Pool::new(first_gate.clone(), id), 2);
    first_gate.caught().await;
    plain.register(4).await.unwrap();
    assert!(plain.return_lease(held.id).await.unwrap());
    if plain.waiting().count != 0 {
        // This store hands no slot over in its return's own step (only an
        // in-process store can): a waiter leaves its queue by its own
        // doing, after its read landed, and the case cannot arise.
        first_gate.release();
        assert_eq!(&two.await.unwrap().unwrap().positions[..], &[0, 1]);
        return;
    }
    second_gate.arm_keeping_hand_offs(Stop::AfterInspect);
    let three = spawn_borrow_n(&Pool::new(second_gate.clone(), id), 3);
    second_gate.caught().await;
    first_gate.release();
    let two = two.await.unwrap().unwrap();
    assert_eq!(&two.positions[..], &[0, 1]);
    second_gate.release();
    second_gate.until_quiet().await;
    settle().await;
    let later = plain.borrow(TTL, Duration::ZERO).await.map(|g| g.forget());
    assert!(
        matches!(later, Err(Error::Exhausted { .. })),
        "a later borrower overtook the queued borrower of 3: {later:?}"
    );
    // The borrower of 2's lease expires: all 4 slots are free.
    f.clock.advance(TTL + SEC);
    let three = tokio::time::timeout(BOUND, three).await;
    let three = three.expect("the borrower of 3 slept while 4 of 4 slots were free");
    assert_eq!(&three.unwrap().unwrap().positions[..], &[0, 1, 2]);
}

/// Rule "Lost replies": two borrowers with one key queue; a return
/// serves the first, and answers the second with that same lease (its
/// key's). The second is dropped before it takes it: the lease stays the
/// first's, held, and nobody else is granted its position.
pub async fn keyed_hand_off_to_a_dropped_borrower_keeps_the_other_borrowers_lease(f: Fixture) {
    let pool = f.pool("p");
    pool.register(1).await.unwrap();
    let held = pool.borrow(TTL, Duration::ZERO).await.unwrap().forget();
    let key = || BorrowOptions::new().key("job-1");
    let first = {
        let pool = pool.clone();
        tokio::spawn(async move { pool.borrow_with(TTL, LONG, key()).await.map(|g| g.forget()) })
    };
    until_waiting(&pool, 1).await;
    // Polled by hand until it queues, then no more: a lease handed to it
    // stays untaken.
    let mut second = Box::pin(pool.borrow_with(TTL, LONG, key()));
    while pool.waiting().count != 2 {
        let polled = second
            .as_mut()
            .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()));
        assert!(polled.is_pending());
        tokio::task::yield_now().await;
    }
    assert!(pool.return_lease(held.id).await.unwrap());
    let first = first.await.unwrap().unwrap();
    drop(second);
    settle().await;
    let holders = pool.holders().await.unwrap();
    let leases: Vec<_> = holders.iter().map(|h| h.lease.id).collect();
    assert_eq!(leases, vec![first.id], "the first borrower's lease is held");
    let other = pool.borrow(TTL, Duration::ZERO).await.map(|g| g.forget());
    assert!(
        matches!(other, Err(Error::Exhausted { .. })),
        "another borrower was granted the first's position: {other:?}"
    );
}

/// R15: a multi-pool head's own call, started before a raise
/// of a count brought a borrower set aside back ahead of it, is not
/// granted: the borrower of 3, queued first, is served first.
pub async fn r15_a_raise_holds_back_a_multi_pool_call_in_flight(f: Fixture) {
    let gated = Arc::new(GatedStore::new(f.store.clone()));
    let (p, q) = (f.pool("p"), f.pool("q"));
    p.register(2).await.unwrap();
    q.register(1).await.unwrap();
    let held_p = p.borrow(TTL, Duration::ZERO).await.unwrap().forget();
    let held_q = q.borrow(TTL, Duration::ZERO).await.unwrap().forget();
    // Refused, it reads the count (2): set aside.
    let three = spawn_borrow_n(&p, 3);
    until_waiting(&p, 1).await;
    settle().await;
    let set = PoolSet::new([
        Pool::new(gated.clone(), p.id()),
        Pool::new(gated.clone(), q.id()),
    ])
    .unwrap();
    let set = tokio::spawn(async move { set.borrow(TTL, LONG).await.map(|s| s.forget()) });
    until_waiting(&q, 1).await;
    settle().await;
    // The set, head of both queues, asks when q frees: its call is held
    // before the store sees it (a call of its already in flight, woken by
    // an earlier change, leaves first; one it starts before q frees is
    // held as well, and then sees q free).
    gated.arm(Stop::BeforeCall);
    gated.until_quiet().await;
    assert!(q.return_lease(held_q.id).await.unwrap());
    gated.caught().await;
    p.register(3).await.unwrap();
    settle().await;
    gated.release();
    gated.until_quiet().await;
    settle().await;
    assert!(p.return_lease(held_p.id).await.unwrap());
    let three = tokio::time::timeout(BOUND, three).await;
    let three = three.expect("the set took a slot of p ahead of the borrower of 3");
    assert_eq!(&three.unwrap().unwrap().positions[..], &[0, 1, 2]);
    set.abort();
}

/// R11 counts from the call: a borrower that comes while an earlier
/// borrower's first ask of the store is in flight (held at the gate)
/// queues behind it, and is not answered before it, even though a slot
/// is free. Found on PostgreSQL, where a first ask is slow enough for a
/// later borrower of the same process to ask beside it and win.
pub async fn r11_a_first_ask_in_flight_is_not_overtaken(f: Fixture) {
    let gate = Arc::new(GatedStore::new(f.store.clone()));
    let pool = Pool::new(gate.clone(), PoolId::from_name("p"));
    pool.register(1).await.unwrap();
    gate.arm(Stop::BeforeCall);
    let first = super::spawn_borrow(&pool, TTL, LONG);
    gate.caught().await;
    // The gate holds one call only: this one reaches the store if it asks.
    let mut later = super::spawn_borrow(&pool, TTL, LONG);
    tokio::select! {
        () = until_waiting(&pool, 2) => {}
        answered = &mut later => panic!(
            "a later borrower was answered while an earlier one's first ask was in flight: {answered:?}"
        ),
    }
    gate.release();
    let first = tokio::time::timeout(BOUND, first)
        .await
        .expect("the first borrower was overtaken and still waits")
        .unwrap()
        .unwrap();
    assert_eq!(first.position, 0);
    assert!(
        !later.is_finished(),
        "the later borrower got a slot of a full pool"
    );
    assert!(pool.return_lease(first.id).await.unwrap());
    let later = tokio::time::timeout(BOUND, later)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(later.position, 0, "served once the first returned");
}
