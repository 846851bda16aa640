//! Cases at the edges a hostile but fair user finds: limits raised to the
//! maximum, calls from outside a runtime, a runtime dropped mid-call, and a
//! head dropped while its refused attempt is still in the store.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use super::gate::{GatedStore, Stop};
use super::{Fixture, SEC, until_in_use, until_waiting};
use crate::store::max_time;
use crate::{error::Error, id::PoolId, limits::Limits, pool::Pool};

const TTL: Duration = Duration::from_secs(60);
const LONG: Duration = Duration::from_secs(3600);

/// Polls `future` once, with no runtime and no waker.
fn poll_once<F: Future>(future: F) -> Poll<F::Output> {
    pin!(future).poll(&mut Context::from_waker(Waker::noop()))
}

/// R5: with `max_ttl` and `max_wait` raised to `Duration::MAX`, a ttl
/// of `Duration::MAX` expires at [`max_time`] (it never wraps into the
/// past, so a second borrow on one slot is refused), a renew saturates the
/// same way, and a borrow waiting `Duration::MAX` waits and is served.
pub async fn limits_raised_to_the_maximum_saturate_and_never_wrap(f: Fixture) {
    let limits = Limits::default()
        .with_max_ttl(Duration::MAX)
        .with_max_wait(Duration::MAX);
    let pool = f.pool("p").with_limits(limits);
    pool.register(1).await.unwrap();
    let mut held = pool.borrow(Duration::MAX, Duration::ZERO).await.unwrap();
    assert_eq!(held.expires_at, max_time());
    assert_eq!(pool.inspect().await.unwrap().in_use, 1);
    match pool.borrow(Duration::MAX, Duration::ZERO).await {
        Err(Error::Exhausted { .. }) => {}
        other => panic!("a second lease on one slot: {other:?}"),
    }
    held.renew(Duration::MAX).await.unwrap();
    assert_eq!(held.expires_at, max_time());

    let waiter = {
        let pool = pool.clone();
        tokio::spawn(async move { pool.borrow(SEC, Duration::MAX).await.map(|g| g.forget()) })
    };
    until_waiting(&pool, 1).await;
    assert!(held.release().await.unwrap());
    assert_eq!(waiter.await.unwrap().unwrap().position, 0);
}

/// R2: a pool may be registered with the largest count a caller allows
/// (`u32::MAX` here) and costs what its leases cost, not its count.
pub async fn r2_the_largest_count_costs_its_leases_not_its_slots(f: Fixture) {
    let pool = f
        .pool("p")
        .with_limits(Limits::default().with_max_count(u32::MAX));
    pool.register(u32::MAX).await.unwrap();
    let first = pool.try_borrow(TTL).await.unwrap();
    let second = pool.try_borrow(TTL).await.unwrap();
    assert_eq!((first.position, second.position), (0, 1));
    let state = pool.inspect().await.unwrap();
    assert_eq!((state.in_use, state.available), (2, u32::MAX - 2));
}

/// R5: outside any runtime nothing panics, and each store does what
/// it declares: a free slot is granted in place by a store that needs no
/// I/O driver for it ([`Fixture::grants_outside_a_runtime`]), and refused
/// with [`Error::NoRuntime`] by the others; a borrow that must wait fails
/// with [`Error::NoRuntime`] on every store and leaves no waiter. A guard
/// dropped on a plain thread returns its lease.
pub async fn calls_outside_a_runtime_fail_clearly_or_work(f: Fixture) {
    let pool = f.pool("p");
    pool.register(1).await.unwrap();

    let guard = pool.borrow_owned(TTL, Duration::ZERO).await.unwrap();
    std::thread::spawn(move || drop(guard)).join().unwrap();
    until_in_use(&pool, 0).await;

    let plain = pool.clone();
    let (free, full) = std::thread::spawn(move || {
        let free = poll_once(plain.try_borrow(TTL)).map(|r| r.map(|g| g.forget()));
        let full = poll_once(plain.borrow(TTL, LONG)).map(|r| r.map(|g| g.forget()));
        (free, full)
    })
    .join()
    .expect("a call outside a runtime panicked");
    let no_runtime = |p: &Poll<crate::error::Result<crate::lease::Lease>>| {
        matches!(
            p,
            Poll::Ready(Err(Error::NoRuntime {
                operation: "borrow"
            }))
        )
    };
    match (f.grants_outside_a_runtime, &free) {
        (true, Poll::Ready(Ok(lease))) => {
            assert_eq!(lease.position, 0);
            // The slot is held: the second call had to wait.
            assert!(no_runtime(&full), "a borrow that must wait gave {full:?}");
            assert!(pool.return_lease(lease.id).await.unwrap());
        }
        (false, free) if no_runtime(free) => {
            assert!(
                no_runtime(&full),
                "a borrow outside a runtime gave {full:?}"
            );
        }
        (grants, other) => panic!(
            "outside a runtime, a free slot gave {other:?} (the store declares it {})",
            if grants {
                "grants"
            } else {
                "fails with NoRuntime"
            }
        ),
    }
    assert_eq!(
        pool.waiting().count,
        0,
        "a call outside a runtime left a waiter"
    );
    until_in_use(&pool, 0).await;
}

/// R12: a borrow whose store call has granted, on a runtime that is dropped
/// before the reply arrives, gives its lease back at once; the return does
/// not depend on the dying runtime.
pub async fn r12_grant_in_flight_when_its_runtime_is_dropped_is_returned(f: Fixture) {
    let gated = Arc::new(GatedStore::new(f.store.clone()));
    let pool = Pool::new(gated.clone(), PoolId::from_name("p"));
    pool.register(1).await.unwrap();
    let first = pool.try_borrow(TTL).await.unwrap();
    let before = first.token;
    assert!(first.release().await.unwrap());
    gated.arm(Stop::AfterGrant);
    let (borrower, gate) = (pool.clone(), gated.clone());
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            drop(tokio::spawn(async move {
                borrower
                    .borrow(TTL, Duration::ZERO)
                    .await
                    .map(|g| g.forget())
            }));
            gate.caught().await;
        });
        // Drops the borrow in the middle of its store call.
        drop(runtime);
    })
    .join()
    .unwrap();
    gated.release();
    until_in_use(&pool, 0).await;
    // The grant in flight took a token: a store that counts by one
    // skipped one.
    assert!(pool.try_borrow(TTL).await.unwrap().token > before + 1);
}

/// R12: a queued head dropped while its refused attempt is still in
/// the store holds no one back: the store forgets its place only after that
/// attempt, which may (re)write it, has finished.
pub async fn r12_head_dropped_while_refused_in_the_store_holds_no_one_back(f: Fixture) {
    let gated = Arc::new(GatedStore::new(f.store.clone()));
    let pool = Pool::new(gated.clone(), PoolId::from_name("p"));
    pool.register(1).await.unwrap();
    let held = pool.try_borrow(TTL).await.unwrap().forget();
    let head = {
        let pool = pool.clone();
        tokio::spawn(async move { pool.borrow(TTL, LONG).await.map(|g| g.forget()) })
    };
    until_waiting(&pool, 1).await;
    gated.until_quiet().await;
    gated.arm(Stop::BeforeCall);
    pool.register(1).await.unwrap(); // the head asks again, into the gate
    gated.caught().await;
    head.abort();
    assert!(head.await.unwrap_err().is_cancelled());
    gated.release(); // the refused attempt lands after the drop
    gated.until_quiet().await;

    assert!(pool.return_lease(held.id).await.unwrap());
    let newcomer = pool.try_borrow(TTL).await;
    assert!(
        newcomer.is_ok(),
        "a dropped head's place still stood ahead: {newcomer:?}"
    );
}

/// R12: the head of the queue is woken by a return (or, in a store
/// that hands slots over in its return, handed the slot) and dropped before
/// it runs, then the next borrower, queued behind it, gets the slot at
/// once, not at the ttl; nothing is left held.
#[allow(clippy::future_not_send)] // a LocalSet fixes when the borrowers run
pub async fn r12_head_dropped_after_a_return_served_it_passes_the_slot_on(f: Fixture) {
    let pool = f.pool("p");
    pool.register(1).await.unwrap();
    let held = pool.borrow(TTL, Duration::ZERO).await.unwrap();
    let local = tokio::task::LocalSet::new();
    local
        .run_until(async {
            // The head keeps its guard while it lives, so whether it was
            // dropped before or after it took the slot, its drop frees it.
            let head = {
                let pool = pool.clone();
                tokio::task::spawn_local(async move {
                    let _guard = pool.borrow(TTL, LONG).await;
                    std::future::pending::<()>().await;
                })
            };
            until_waiting(&pool, 1).await;
            let next = {
                let pool = pool.clone();
                tokio::task::spawn_local(
                    async move { pool.borrow(TTL, LONG).await.map(|g| g.forget()) },
                )
            };
            until_waiting(&pool, 2).await;
            // Local tasks run only when this future yields: a store whose
            // return needs no await serves the head and the head is dropped
            // before it could take what it was given.
            assert!(held.release().await.unwrap());
            head.abort();
            let lease = tokio::time::timeout(10 * SEC, next)
                .await
                .expect("the next borrower was left waiting for the slot")
                .unwrap()
                .unwrap();
            assert_eq!(lease.position, 0);
        })
        .await;
    until_in_use(&pool, 1).await;
    assert_eq!(pool.waiting().count, 0);
}
