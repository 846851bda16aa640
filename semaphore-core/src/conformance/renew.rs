//! Cases for renew (rule "Beyond the basic model"): a live lease gets a new
//! ttl and keeps its position and token; anything else is a clear error.

use std::time::Duration;

use super::{Fixture, SEC, spawn_borrow, until_waiting};
use crate::{clock::Clock, error::Error, id::LeaseId, lease::Lease};

/// Renew extends a live lease from now, keeping position, token and id; the
/// lease then outlives its first expiry. A ttl above the maximum is clamped.
pub async fn renew_extends_a_live_lease_keeping_position_and_token(f: Fixture) {
    let pool = f.pool("p");
    pool.register(2).await.unwrap();
    let _first = pool.borrow(SEC * 60, Duration::ZERO).await.unwrap();
    let lease = pool
        .borrow(SEC * 10, Duration::ZERO)
        .await
        .unwrap()
        .forget();
    f.clock.advance(SEC * 6);
    let renewed = pool.renew(&lease, SEC * 10).await.unwrap();
    assert_eq!(
        (renewed.id, renewed.position, renewed.token),
        (lease.id, 1, lease.token)
    );
    assert_eq!(renewed.expires_at, lease.expires_at + SEC * 6);
    f.clock.advance(SEC * 9);
    assert_eq!(
        pool.inspect().await.unwrap().in_use,
        2,
        "expired at the old expiry"
    );
    f.clock.advance(SEC);
    assert_eq!(pool.inspect().await.unwrap().in_use, 1);

    let long = pool.borrow(SEC, Duration::ZERO).await.unwrap().forget();
    let clamped = pool.renew(&long, Duration::MAX).await.unwrap();
    assert_eq!(clamped.time_left(f.clock.now()), pool.limits().max_ttl);
    let err = pool.renew(&long, Duration::ZERO).await.unwrap_err();
    assert!(
        matches!(err, Error::InvalidArgument { field: "ttl", .. }),
        "{err:?}"
    );
}

/// A renew that comes too late says the lease expired, whether or not its
/// slot has been handed out again since; the slot is not taken back.
pub async fn renew_of_an_expired_lease_is_lease_expired(f: Fixture) {
    let pool = f.pool("p");
    pool.register(1).await.unwrap();
    let lease = pool.borrow(SEC * 5, Duration::ZERO).await.unwrap().forget();
    f.clock.advance(SEC * 5);
    let err = pool.renew(&lease, SEC * 5).await.unwrap_err();
    assert!(
        matches!(err, Error::LeaseExpired { lease: id, expired_at, .. }
            if id == lease.id && expired_at == lease.expires_at),
        "{err:?}"
    );
    let next = pool.borrow(SEC * 5, Duration::ZERO).await.unwrap().forget();
    let err = pool.renew(&lease, SEC * 5).await.unwrap_err();
    assert!(matches!(err, Error::LeaseExpired { .. }), "{err:?}");
    assert_eq!(pool.holders().await.unwrap()[0].lease, next);
}

/// A returned, force-returned or unknown lease is not found; a deleted
/// pool is not found; none of them is a silent success.
pub async fn renew_of_a_returned_unknown_or_deleted_lease_fails(f: Fixture) {
    let pool = f.pool("p");
    pool.register(2).await.unwrap();
    let returned = pool
        .borrow(SEC * 60, Duration::ZERO)
        .await
        .unwrap()
        .forget();
    assert!(pool.return_lease(returned.id).await.unwrap());
    let not_found = |r: Result<Lease, Error>| matches!(r, Err(Error::LeaseNotFound { .. }));
    assert!(not_found(pool.renew(&returned, SEC).await));

    let forced = pool
        .borrow(SEC * 60, Duration::ZERO)
        .await
        .unwrap()
        .forget();
    assert!(pool.force_return(forced.position).await.unwrap().is_some());
    assert!(not_found(pool.renew(&forced, SEC).await));

    let mut unknown = forced;
    unknown.id = LeaseId::new();
    assert!(not_found(pool.renew(&unknown, SEC).await));
    let other = f.pool("other");
    other.register(1).await.unwrap();
    let held = pool
        .borrow(SEC * 60, Duration::ZERO)
        .await
        .unwrap()
        .forget();
    assert!(
        not_found(other.renew(&held, SEC).await),
        "another pool's lease"
    );

    assert!(pool.delete().await.unwrap());
    let err = pool.renew(&held, SEC).await.unwrap_err();
    assert!(matches!(err, Error::PoolNotFound { .. }), "{err:?}");
    pool.register(2).await.unwrap();
    assert!(
        not_found(pool.renew(&held, SEC).await),
        "deleted, then registered again"
    );
    assert_eq!(pool.inspect().await.unwrap().in_use, 0);
}

/// A renew that shortens a lease moves the pool's earliest expiry: a waiter
/// wakes at the new one.
pub async fn renew_shortening_a_lease_wakes_a_waiter_at_the_new_expiry(f: Fixture) {
    let pool = f.pool("p");
    pool.register(1).await.unwrap();
    let held = pool
        .borrow(SEC * 3600, Duration::ZERO)
        .await
        .unwrap()
        .forget();
    let waiter = spawn_borrow(&pool, SEC, SEC * 3600);
    until_waiting(&pool, 1).await;
    pool.renew(&held, SEC * 5).await.unwrap();
    f.clock.advance(SEC * 5);
    assert_eq!(waiter.await.unwrap().unwrap().position, 0);
}

/// A guard renews the lease it holds and shows the new expiry; after a
/// failed renew it still holds the old lease.
pub async fn renew_through_a_guard_updates_the_guard(f: Fixture) {
    let pool = f.pool("p");
    pool.register(1).await.unwrap();
    let mut guard = pool.borrow(SEC * 10, Duration::ZERO).await.unwrap();
    let before = guard.lease().clone();
    f.clock.advance(SEC * 4);
    guard.renew(SEC * 10).await.unwrap();
    assert_eq!(guard.expires_at, before.expires_at + SEC * 4);
    assert_eq!(guard.token, before.token);
    f.clock.advance(SEC * 10);
    let err = guard.renew(SEC).await.unwrap_err();
    assert!(matches!(err, Error::LeaseExpired { .. }), "{err:?}");
    assert_eq!(guard.expires_at, before.expires_at + SEC * 4);
}

/// A renew by lease id alone: the same lease renewed; a returned or unknown
/// id is [`Error::LeaseNotFound`], a deleted pool [`Error::PoolNotFound`].
pub async fn renew_by_id_needs_only_the_lease_id(f: Fixture) {
    let pool = f.pool("p");
    pool.register(2).await.unwrap();
    let held = pool.try_borrow(SEC * 30).await.unwrap().forget();
    f.clock.advance(SEC * 10);
    let renewed = pool.renew(held.id, SEC * 30).await.unwrap();
    assert_eq!(
        (renewed.id, renewed.position, renewed.token),
        (held.id, held.position, held.token)
    );
    assert!(renewed.expires_at > held.expires_at);
    assert!(pool.return_lease(held.id).await.unwrap());
    for id in [held.id, LeaseId::new()] {
        match pool.renew(id, SEC * 30).await {
            Err(Error::LeaseNotFound { lease, .. }) => assert_eq!(lease, id),
            other => panic!("{other:?}"),
        }
    }
    assert!(pool.delete().await.unwrap());
    assert!(matches!(
        pool.renew(held.id, SEC * 30).await,
        Err(Error::PoolNotFound { .. })
    ));
}
