//! Cases for the operations one at a time.

use std::time::Duration;

use super::{Fixture, SEC};
use crate::store::lowest_free;
use crate::{error::Error, lease::PoolState, limits::Limits, pool::Pool};

const TTL: Duration = Duration::from_secs(60);

fn state(pool: &Pool, count: u32, in_use: u32) -> PoolState {
    PoolState::new(pool.id(), count, in_use)
}

/// R1: two handles made from the same name mean the same pool.
pub async fn r1_pool_id_from_name_names_one_pool_for_every_handle(f: Fixture) {
    let a = f.pool("shared-name");
    let b = f.pool("shared-name");
    a.register(2).await.unwrap();
    let _held = a.borrow(TTL, Duration::ZERO).await.unwrap();
    assert_eq!(b.inspect().await.unwrap(), state(&b, 2, 1));
    assert!(matches!(
        f.pool("other-name").inspect().await,
        Err(Error::PoolNotFound { .. })
    ));
}

/// R2: register creates the pool, and again sets its count.
pub async fn r2_register_creates_then_sets_count(f: Fixture) {
    let pool = f.pool("p");
    assert_eq!(pool.register(3).await.unwrap(), state(&pool, 3, 0));
    assert_eq!(pool.register(3).await.unwrap(), state(&pool, 3, 0));
    let _held = pool.borrow(TTL, Duration::ZERO).await.unwrap();
    assert_eq!(pool.register(5).await.unwrap(), state(&pool, 5, 1));
    assert_eq!(pool.inspect().await.unwrap(), state(&pool, 5, 1));
}

/// R2: a count above `max_count` is rejected, naming the field and
/// range, and the pool keeps its count.
pub async fn r2_count_above_max_is_rejected_and_nothing_changes(f: Fixture) {
    let pool = f.pool("p");
    pool.register(2).await.unwrap();
    let err = pool.register(1001).await.unwrap_err();
    match &err {
        Error::InvalidArgument { field, allowed, .. } => {
            assert_eq!(*field, "count");
            assert_eq!(allowed, "0..=1000");
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    assert_eq!(pool.inspect().await.unwrap().count, 2);
    let small = pool.clone().with_limits(Limits {
        max_count: 4,
        ..Limits::default()
    });
    assert!(small.register(5).await.is_err());
    assert!(matches!(
        f.pool("never").register(1001).await,
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        f.pool("never").inspect().await,
        Err(Error::PoolNotFound { .. })
    ));
}

/// R2: a pool of count 0 exists and grants nothing.
pub async fn r2_count_zero_grants_nothing(f: Fixture) {
    let pool = f.pool("p");
    assert_eq!(pool.register(0).await.unwrap(), state(&pool, 0, 0));
    assert!(matches!(
        pool.try_borrow(TTL).await,
        Err(Error::Exhausted { .. })
    ));
}

/// R2: lowering count below in_use revokes nothing and withholds grants;
/// raising it back grants again.
pub async fn r2_lowering_count_revokes_nothing_and_raising_it_back_grants(f: Fixture) {
    let pool = f.pool("p");
    pool.register(3).await.unwrap();
    let a = pool.borrow(TTL, Duration::ZERO).await.unwrap();
    let b = pool.borrow(TTL, Duration::ZERO).await.unwrap();
    let c = pool.borrow(TTL, Duration::ZERO).await.unwrap();
    assert_eq!(pool.register(1).await.unwrap(), state(&pool, 1, 3));
    assert_eq!(pool.inspect().await.unwrap().available, 0);
    assert!(a.release().await.unwrap(), "lowering revoked nothing");
    assert!(matches!(
        pool.try_borrow(TTL).await,
        Err(Error::Exhausted { .. })
    ));
    assert!(b.release().await.unwrap());
    assert!(matches!(
        pool.try_borrow(TTL).await,
        Err(Error::Exhausted { .. })
    ));
    assert_eq!(pool.register(3).await.unwrap(), state(&pool, 3, 1));
    let d = pool.borrow(TTL, Duration::ZERO).await.unwrap();
    assert_eq!(d.position, 0);
    drop(c);
}

/// R3: inspect gives `{id, count, in_use, available}`; an unknown pool is
/// not found.
pub async fn r3_inspect_reports_one_instant_and_unknown_is_not_found(f: Fixture) {
    let pool = f.pool("p");
    match pool.inspect().await {
        Err(Error::PoolNotFound { pool: id }) => assert_eq!(id, pool.id()),
        other => panic!("expected PoolNotFound, got {other:?}"),
    }
    pool.register(4).await.unwrap();
    let _a = pool.borrow(TTL, Duration::ZERO).await.unwrap();
    let _b = pool.borrow(TTL, Duration::ZERO).await.unwrap();
    let s = pool.inspect().await.unwrap();
    assert_eq!((s.id, s.count, s.in_use, s.available), (pool.id(), 4, 2, 2));
}

/// R4: delete reports whether anything was removed, and lease ids of the
/// pool stop being valid, also after it is registered again.
pub async fn r4_delete_is_idempotent_and_invalidates_leases(f: Fixture) {
    let pool = f.pool("p");
    assert!(!pool.delete().await.unwrap());
    pool.register(2).await.unwrap();
    let lease = pool.borrow(TTL, Duration::ZERO).await.unwrap().forget();
    assert!(pool.delete().await.unwrap());
    assert!(!pool.delete().await.unwrap());
    assert!(matches!(
        pool.inspect().await,
        Err(Error::PoolNotFound { .. })
    ));
    assert!(!pool.return_lease(lease.id).await.unwrap());
    pool.register(2).await.unwrap();
    assert!(!pool.return_lease(lease.id).await.unwrap());
    assert_eq!(pool.inspect().await.unwrap().in_use, 0);
}

/// R5: a zero ttl is invalid, names `ttl`, and takes nothing.
pub async fn r5_ttl_zero_is_invalid_and_nothing_changes(f: Fixture) {
    let pool = f.pool("p");
    pool.register(1).await.unwrap();
    // Under a millisecond too (R5, "the smallest ttl"): it rounds to 0 ms,
    // a lease granted expired.
    for ttl in [
        Duration::ZERO,
        Duration::from_nanos(1),
        Duration::from_micros(400),
    ] {
        let err = pool.borrow(ttl, SEC).await.unwrap_err();
        assert!(
            matches!(err, Error::InvalidArgument { field: "ttl", .. }),
            "{ttl:?}: {err:?}"
        );
    }
    let held = pool.borrow(TTL, Duration::ZERO).await.unwrap();
    let err = pool
        .renew(held.lease(), Duration::from_micros(999))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::InvalidArgument { field: "ttl", .. }),
        "a renewal: {err:?}"
    );
    drop(held);
    crate::conformance::until_in_use(&pool, 0).await;
}

/// R5: an unknown pool fails with not-found at once, even with a long wait.
pub async fn r5_unknown_pool_fails_at_once_whatever_the_wait(f: Fixture) {
    let pool = f.pool("never-registered");
    // The manual clock never moves here: a wait would hang the case.
    let err = pool
        .borrow(TTL, Duration::from_secs(3600))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::PoolNotFound { .. }), "{err:?}");
}

/// R5: with `wait = 0` an exhausted pool fails at once.
pub async fn r5_wait_zero_on_exhausted_pool_fails_at_once(f: Fixture) {
    let pool = f.pool("p");
    pool.register(1).await.unwrap();
    let _held = pool.borrow(TTL, Duration::ZERO).await.unwrap();
    match pool.borrow(TTL, Duration::ZERO).await {
        Err(Error::Exhausted { pool: id, waited }) => {
            assert_eq!((id, waited), (pool.id(), Duration::ZERO));
        }
        other => panic!("expected Exhausted, got {other:?}"),
    }
}

/// R5, rule "Limits": ttl and wait above their maxima are clamped; the lease shows
/// the clamped expiry.
pub async fn r5_ttl_and_wait_are_clamped(f: Fixture) {
    let limits = Limits::default()
        .with_max_ttl(Duration::from_secs(10))
        .with_max_wait(Duration::from_secs(2));
    let pool = f.pool("p").with_limits(limits);
    pool.register(1).await.unwrap();
    let now = crate::clock::truncate_ms(crate::clock::Clock::now(&*f.clock));
    let lease = pool
        .borrow(Duration::from_secs(3600), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(lease.expires_at, now + Duration::from_secs(10));
    assert_eq!(lease.time_left(), Duration::from_secs(10));

    let waiter = {
        let pool = pool.clone();
        tokio::spawn(async move {
            pool.borrow(SEC, Duration::from_secs(3600))
                .await
                .map(|l| l.forget())
        })
    };
    super::until_waiting(&pool, 1).await;
    f.clock.advance(Duration::from_secs(2));
    match waiter.await.unwrap() {
        Err(Error::Exhausted { waited, .. }) => assert_eq!(waited, Duration::from_secs(2)),
        other => panic!("expected Exhausted after the clamped wait, got {other:?}"),
    }
}

/// R6: a grant takes the lowest free position; a returned slot is the next
/// one handed out.
pub async fn r6_grants_lowest_free_and_reuses_freed_slot_next(f: Fixture) {
    let pool = f.pool("p");
    pool.register(4).await.unwrap();
    let mut held = Vec::new();
    for expected in 0..4 {
        let lease = pool.borrow(TTL, Duration::ZERO).await.unwrap().forget();
        assert_eq!(lease.position, expected);
        held.push(lease);
    }
    for freed in [2, 0] {
        assert!(pool.return_lease(held[freed].id).await.unwrap());
    }
    let next = pool.borrow(TTL, Duration::ZERO).await.unwrap();
    assert_eq!(Some(next.position), lowest_free(4, [1, 3]));
    let after = pool.borrow(TTL, Duration::ZERO).await.unwrap();
    assert_eq!(Some(after.position), lowest_free(4, [0, 1, 3]));
    assert_eq!((next.position, after.position), (0, 2));
}

/// R6: after lowering count, positions at or above it are never handed out.
pub async fn r6_positions_at_or_above_lowered_count_are_not_handed_out(f: Fixture) {
    let pool = f.pool("p");
    pool.register(4).await.unwrap();
    let leases: Vec<_> = borrow_n(&pool, 4).await;
    pool.register(2).await.unwrap();
    for l in &leases {
        pool.return_lease(l.id).await.unwrap();
    }
    let a = pool.borrow(TTL, Duration::ZERO).await.unwrap();
    let b = pool.borrow(TTL, Duration::ZERO).await.unwrap();
    assert_eq!((a.position, b.position), (0, 1));
    assert!(matches!(
        pool.try_borrow(TTL).await,
        Err(Error::Exhausted { .. })
    ));
}

async fn borrow_n(pool: &Pool, n: usize) -> Vec<crate::lease::Lease> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(pool.borrow(TTL, Duration::ZERO).await.unwrap().forget());
    }
    out
}

/// R7: a lease whose expiry has passed does not count, whether or not any
/// clean-up ran; its slot is the next handed out.
pub async fn r7_expired_lease_does_not_count(f: Fixture) {
    let pool = f.pool("p");
    pool.register(2).await.unwrap();
    let short = pool
        .borrow(Duration::from_secs(5), Duration::ZERO)
        .await
        .unwrap()
        .forget();
    let _long = pool.borrow(TTL, Duration::ZERO).await.unwrap();
    f.clock.advance(Duration::from_millis(4999));
    assert_eq!(pool.inspect().await.unwrap().in_use, 2);
    f.clock.advance(Duration::from_millis(1));
    assert_eq!(pool.inspect().await.unwrap(), state(&pool, 2, 1));
    let next = pool.borrow(TTL, Duration::ZERO).await.unwrap();
    assert_eq!(next.position, short.position);
}

/// R6 and R7: an expired slot is the next one handed out, before a higher
/// free one, whether or not any clean-up has run since it expired.
pub async fn r6_an_expired_slot_goes_before_a_higher_free_one(f: Fixture) {
    let pool = f.pool("p");
    pool.register(3).await.unwrap();
    // Kept as a guard: forgetting it would unbind it, a call that may
    // clean up on its way.
    let short = pool.borrow(SEC, Duration::ZERO).await.unwrap();
    let _long = pool.borrow(TTL, Duration::ZERO).await.unwrap();
    assert_eq!(short.position, 0);
    f.clock.advance(SEC);
    let next = pool.borrow(TTL, Duration::ZERO).await.unwrap();
    assert_eq!(next.position, 0, "the expired slot, not position 2");
}

/// R8: return reports `true` only for an active lease: unknown, returned,
/// expired and deleted leases report `false`, never an error.
pub async fn r8_return_reports_only_active_leases(f: Fixture) {
    let pool = f.pool("p");
    pool.register(3).await.unwrap();
    assert!(
        !pool.return_lease(crate::id::LeaseId::new()).await.unwrap(),
        "unknown"
    );
    let a = pool.borrow(TTL, Duration::ZERO).await.unwrap().forget();
    assert!(pool.return_lease(a.id).await.unwrap(), "active");
    assert!(!pool.return_lease(a.id).await.unwrap(), "returned");
    let b = pool.borrow(SEC, Duration::ZERO).await.unwrap().forget();
    f.clock.advance(SEC);
    assert!(!pool.return_lease(b.id).await.unwrap(), "expired");
    let c = pool.borrow(TTL, Duration::ZERO).await.unwrap().forget();
    let other = f.pool("other");
    other.register(1).await.unwrap();
    assert!(
        !other.return_lease(c.id).await.unwrap(),
        "another pool's lease"
    );
    assert!(pool.return_lease(c.id).await.unwrap());
    assert!(
        !f.pool("never").return_lease(c.id).await.unwrap(),
        "unknown pool"
    );
}

/// R9: tokens strictly grow, also across delete and register again.
pub async fn r9_tokens_grow_across_delete_and_register_again(f: Fixture) {
    let pool = f.pool("p");
    pool.register(2).await.unwrap();
    let mut last = 0;
    for round in 0..3 {
        for _ in 0..3 {
            let lease = pool.borrow(TTL, Duration::ZERO).await.unwrap();
            assert!(
                lease.token > last,
                "round {round}: {} after {last}",
                lease.token
            );
            last = lease.token;
            // Returned before the next borrow: a dropped guard's return may
            // land later on a store that does I/O.
            assert!(lease.release().await.unwrap());
        }
        pool.delete().await.unwrap();
        pool.register(2).await.unwrap();
    }
}

/// R14: bad input is a clear error naming the field and the allowed range,
/// and changes nothing.
pub async fn r14_bad_input_names_field_and_range(f: Fixture) {
    let pool = f.pool("p");
    let msg = pool.register(5000).await.unwrap_err().to_string();
    assert!(
        msg.contains("count") && msg.contains("0..=1000") && msg.contains("5000"),
        "{msg}"
    );
    assert!(matches!(
        pool.inspect().await,
        Err(Error::PoolNotFound { .. })
    ));
    pool.register(1).await.unwrap();
    let msg = pool
        .try_borrow(Duration::ZERO)
        .await
        .unwrap_err()
        .to_string();
    assert!(msg.contains("ttl") && msg.contains("at least 1ms"), "{msg}");
    let msg = "gpus".parse::<crate::id::PoolId>().unwrap_err().to_string();
    assert!(msg.contains("pool_id") && msg.contains("UUID"), "{msg}");
    assert_eq!(pool.inspect().await.unwrap(), state(&pool, 1, 0));
}
