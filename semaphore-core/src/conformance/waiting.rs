//! Cases for waiting, wake-ups, order and cancellation.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use std::sync::Arc;

use super::gate::{GatedStore, Stop};
use super::{Fixture, SEC, spawn_borrow, until_in_use, until_waiting};
use crate::{error::Error, id::PoolId, lease::Lease, pool::Pool};

const TTL: Duration = Duration::from_secs(60);
const LONG: Duration = Duration::from_secs(3600);

/// A pool of `count` slots, all held.
async fn full_pool(f: &Fixture, count: u32) -> (Pool, Vec<Lease>) {
    let pool = f.pool("p");
    pool.register(count).await.unwrap();
    let mut held = Vec::new();
    for _ in 0..count {
        held.push(pool.borrow(TTL, Duration::ZERO).await.unwrap().forget());
    }
    (pool, held)
}

/// R2: raising the count wakes waiters at once, as many as it frees.
pub async fn r2_raising_count_wakes_waiters_at_once(f: Fixture) {
    let (pool, _held) = full_pool(&f, 1).await;
    let w1 = spawn_borrow(&pool, TTL, LONG);
    until_waiting(&pool, 1).await;
    let w2 = spawn_borrow(&pool, TTL, LONG);
    until_waiting(&pool, 2).await;
    pool.register(3).await.unwrap();
    let mut positions = [
        w1.await.unwrap().unwrap().position,
        w2.await.unwrap().unwrap().position,
    ];
    positions.sort_unstable();
    assert_eq!(positions, [1, 2]);
}

/// R4: deleting a pool fails its waiters with not-found at once, not at
/// their deadline (the clock never moves here).
pub async fn r4_delete_fails_waiters_at_once(f: Fixture) {
    let (pool, _held) = full_pool(&f, 1).await;
    let waiters: Vec<_> = (0..3).map(|_| spawn_borrow(&pool, TTL, LONG)).collect();
    until_waiting(&pool, 3).await;
    assert!(pool.delete().await.unwrap());
    for w in waiters {
        let err = w.await.unwrap().unwrap_err();
        assert!(matches!(err, Error::PoolNotFound { .. }), "{err:?}");
    }
    assert_eq!(pool.waiting().count, 0);
}

/// R5: a waiter fails with exhausted when its wait runs out, not before.
pub async fn r5_waiter_fails_exhausted_when_wait_runs_out(f: Fixture) {
    let pool = f.pool("p");
    pool.register(1).await.unwrap();
    let _held = pool.borrow(LONG, Duration::ZERO).await.unwrap();
    let waiter = spawn_borrow(&pool, TTL, Duration::from_secs(5));
    until_waiting(&pool, 1).await;
    f.clock.advance(Duration::from_millis(4999));
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    assert!(!waiter.is_finished(), "gave up before its wait ran out");
    f.clock.advance(Duration::from_millis(1));
    match waiter.await.unwrap() {
        Err(Error::Exhausted { waited, .. }) => assert_eq!(waited, Duration::from_secs(5)),
        other => panic!("expected Exhausted, got {other:?}"),
    }
    assert_eq!(pool.waiting().count, 0);
}

/// R5: a waiter is woken when the earliest lease expires, with no
/// return and no clean-up.
pub async fn r5_waiter_is_woken_by_expiry(f: Fixture) {
    let pool = f.pool("p");
    pool.register(2).await.unwrap();
    let _long = pool.borrow(TTL, Duration::ZERO).await.unwrap();
    let short = pool
        .borrow(Duration::from_secs(10), Duration::ZERO)
        .await
        .unwrap()
        .forget();
    let waiter = spawn_borrow(&pool, TTL, LONG);
    until_waiting(&pool, 1).await;
    f.clock.advance(Duration::from_secs(10));
    let lease = waiter.await.unwrap().unwrap();
    assert_eq!(lease.position, short.position);
}

/// R8: a return frees the slot at once and wakes a waiter.
pub async fn r8_return_wakes_a_waiter(f: Fixture) {
    let (pool, held) = full_pool(&f, 2).await;
    let waiter = spawn_borrow(&pool, TTL, LONG);
    until_waiting(&pool, 1).await;
    assert!(pool.return_lease(held[1].id).await.unwrap());
    assert_eq!(waiter.await.unwrap().unwrap().position, 1);
}

/// R11: ten waiters are served in the order they arrived.
pub async fn r11_ten_waiters_are_served_in_arrival_order(f: Fixture) {
    let (pool, held) = full_pool(&f, 1).await;
    let mut waiters = Vec::new();
    for i in 0..10 {
        waiters.push(spawn_borrow(&pool, TTL, LONG));
        until_waiting(&pool, i + 1).await;
    }
    let mut current = held[0].clone();
    for (i, waiter) in waiters.into_iter().enumerate() {
        assert!(pool.return_lease(current.id).await.unwrap());
        current = waiter
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("waiter {i}: {e}"));
        assert_eq!(
            pool.waiting().count,
            9 - i,
            "waiter {i} was served out of order"
        );
    }
}

/// R11: while a borrower waits, a newcomer never takes a slot ahead of it,
/// even one that frees up as the newcomer arrives.
pub async fn r11_newcomer_does_not_jump_the_queue(f: Fixture) {
    let (pool, held) = full_pool(&f, 1).await;
    let first = spawn_borrow(&pool, TTL, LONG);
    until_waiting(&pool, 1).await;
    let second = spawn_borrow(&pool, TTL, LONG);
    until_waiting(&pool, 2).await;
    assert!(matches!(
        pool.try_borrow(TTL).await,
        Err(Error::Exhausted { .. })
    ));
    pool.return_lease(held[0].id).await.unwrap();
    let got = first.await.unwrap().unwrap();
    assert_eq!(pool.waiting().count, 1, "the second waiter is still queued");
    pool.return_lease(got.id).await.unwrap();
    second.await.unwrap().unwrap();
}

/// R12: a waiter that is dropped takes nothing and leaves the queue; the
/// next one is served.
pub async fn r12_dropped_waiter_leaves_queue_and_next_is_served(f: Fixture) {
    let (pool, held) = full_pool(&f, 1).await;
    let head = spawn_borrow(&pool, TTL, LONG);
    until_waiting(&pool, 1).await;
    let next = spawn_borrow(&pool, TTL, LONG);
    until_waiting(&pool, 2).await;
    head.abort();
    until_waiting(&pool, 1).await;
    assert_eq!(
        pool.inspect().await.unwrap().in_use,
        1,
        "the dropped waiter took nothing"
    );
    pool.return_lease(held[0].id).await.unwrap();
    assert_eq!(next.await.unwrap().unwrap().position, 0);
    assert_eq!(pool.inspect().await.unwrap().in_use, 1);
}

/// R12: a borrow dropped after its first poll, whatever step it was at,
/// leaves no slot held once its clean-up ran: every slot can be borrowed
/// again. (A store that finishes the call in the background may grant and
/// return after the drop; a leak would hang the case until its guard fails
/// it.)
pub async fn r12_borrow_dropped_after_first_poll_holds_nothing(f: Fixture) {
    let pool = f.pool("p");
    pool.register(2).await.unwrap();
    for _ in 0..20 {
        let mut borrow = pin!(pool.borrow(TTL, SEC));
        let polled = borrow
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()));
        if let Poll::Ready(r) = polled {
            drop(r.unwrap());
        }
    }
    assert_eq!(pool.waiting().count, 0);
    loop {
        let a = pool.try_borrow(TTL).await;
        let b = pool.try_borrow(TTL).await;
        if a.is_ok() && b.is_ok() {
            break;
        }
        tokio::task::yield_now().await;
    }
}

/// R12: a borrow dropped in its store call, before the store acted: the
/// store then grants the call, finished without the borrower, and the core
/// returns that lease at once, not at its ttl. Its token is spent.
pub async fn r12_grant_landing_after_the_drop_is_returned_at_once(f: Fixture) {
    let gated = Arc::new(GatedStore::new(f.store.clone()));
    let pool = Pool::new(gated.clone(), PoolId::from_name("p"));
    pool.register(1).await.unwrap();
    let first = pool.try_borrow(TTL).await.unwrap();
    let before = first.token;
    assert!(first.release().await.unwrap());
    gated.arm(Stop::BeforeCall);
    gated.drop_at_gate(pool.borrow(TTL, Duration::ZERO));
    gated.release();
    // Quiet: the released call has left the store, its grant made. The
    // return is a second call, made by the dropped borrow's detached
    // clean-up: under load it may not have entered the store yet when the
    // gate is first quiet. The manual clock stands still, so the slot
    // frees only if the grant is returned (a lease left to its ttl fails
    // the case's 60 s guard).
    gated.until_quiet().await;
    until_in_use(&pool, 0).await;
    let next = pool.try_borrow(TTL).await.unwrap();
    assert_eq!(next.position, 0);
    // Tokens only grow: a grant to the dropped borrow took one
    // between, so a store that counts by one skipped one.
    assert!(
        next.token > before + 1,
        "no token went to the dropped borrow"
    );
}

/// R11: returns that free slots while the queue's head has
/// its own store call in flight do not grant that head a second lease
/// besides the one its call gets. The head ends up holding one lease, at
/// the lowest position freed, and the pool counts it and the one still
/// held, nothing more. On the memory store, a hand-off granted such a head
/// a lease, its own call another at the next position, and the ticket gave
/// the first back: the borrower kept a position that was not the lowest,
/// and a slot sat held by nobody meanwhile (a CI run caught it; with a key
/// the call's answer is the handed lease itself, which the ticket then
/// freed under the borrower: see the `in_flight` cases).
pub async fn r11_returns_meet_the_heads_own_call_in_flight(f: Fixture) {
    let gated = Arc::new(GatedStore::new(f.store.clone()));
    let pool = Pool::new(gated.clone(), PoolId::from_name("p"));
    pool.register(3).await.unwrap();
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(pool.borrow(TTL, Duration::ZERO).await.unwrap().forget());
    }
    let waiter = spawn_borrow(&pool, TTL, LONG);
    until_waiting(&pool, 1).await;
    // A change that frees nothing wakes the head to ask: its call is held.
    gated.arm_keeping_hand_offs(Stop::BeforeCall);
    pool.register(3).await.unwrap();
    gated.caught().await;
    assert!(pool.return_lease(held[0].id).await.unwrap());
    assert!(pool.return_lease(held[1].id).await.unwrap());
    gated.release();
    let lease = waiter.await.unwrap().unwrap();
    gated.until_quiet().await;
    let holders = pool.holders().await.unwrap();
    let mut positions: Vec<(u32, _)> = holders
        .iter()
        .map(|h| (h.lease.position, h.lease.id))
        .collect();
    positions.sort_unstable();
    assert_eq!(
        positions,
        vec![(lease.position, lease.id), (2, held[2].id)],
        "held: the head's one lease and the one never returned"
    );
    assert_eq!(lease.position, 0, "the lowest position freed");
}

/// R5: a waiter that became head when the one ahead took the last
/// slot is woken by that lease's expiry, though nothing else changes.
pub async fn r5_new_head_is_woken_by_expiry_of_the_slot_just_granted(f: Fixture) {
    let (pool, held) = full_pool(&f, 1).await;
    let first = {
        let pool = pool.clone();
        tokio::spawn(async move {
            pool.borrow(Duration::from_secs(5), LONG)
                .await
                .map(|g| g.forget())
        })
    };
    until_waiting(&pool, 1).await;
    let second = spawn_borrow(&pool, TTL, LONG);
    until_waiting(&pool, 2).await;
    assert!(pool.return_lease(held[0].id).await.unwrap());
    assert_eq!(first.await.unwrap().unwrap().position, 0);
    until_waiting(&pool, 1).await;
    f.clock.advance(Duration::from_secs(5));
    assert_eq!(second.await.unwrap().unwrap().position, 0);
}
