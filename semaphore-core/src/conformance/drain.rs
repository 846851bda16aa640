//! Cases for draining a pool: no new grants, while returns and renewals
//! go on (rule "Drain", kept by the store).

use std::time::Duration;

use super::{Fixture, until_waiting};
use crate::{error::Error, id::PoolId, options::BorrowOptions, set::PoolSet};

const TTL: Duration = Duration::from_secs(60);
const LONG: Duration = Duration::from_secs(3600);

fn draining(e: &Error) -> bool {
    matches!(e, Error::Draining { .. })
}

/// A draining pool grants nothing new, of one slot or several; its holder
/// renews and returns; the count may change; the drain shows in the state
/// and survives a register; ending it grants again.
pub async fn drain_stops_new_grants_and_lets_holders_return_and_renew(f: Fixture) {
    let pool = f.pool("p");
    pool.register(2).await.unwrap();
    let held = pool.borrow(TTL, Duration::ZERO).await.unwrap().forget();
    let state = pool.set_draining(true).await.unwrap();
    assert!(state.draining);
    assert_eq!(state.in_use, 1);
    let refused = pool.try_borrow(TTL).await.unwrap_err();
    assert!(draining(&refused), "{refused:?}");
    assert!(draining(
        &pool
            .borrow_with(TTL, Duration::ZERO, BorrowOptions::new().slots(1))
            .await
            .unwrap_err()
    ));
    assert!(
        draining(&pool.borrow(TTL, LONG).await.unwrap_err()),
        "a borrow that may wait fails at once"
    );
    assert_eq!(pool.inspect().await.unwrap().in_use, 1, "nothing taken");
    pool.renew(&held, TTL * 2).await.expect("renewals go on");
    assert!(
        pool.register(3).await.unwrap().draining,
        "register keeps it"
    );
    assert!(pool.inspect().await.unwrap().draining);
    assert!(pool.return_lease(held.id).await.unwrap(), "returns go on");
    assert_eq!(pool.inspect().await.unwrap().in_use, 0);
    assert!(
        pool.set_draining(true).await.unwrap().draining,
        "idempotent"
    );
    assert!(!pool.set_draining(false).await.unwrap().draining);
    let _again = pool.try_borrow(TTL).await.expect("grants again");
    match f.pool("unknown").set_draining(true).await {
        Err(Error::PoolNotFound { .. }) => {}
        other => panic!("{other:?}"),
    }
}

/// A drain fails a waiting borrower at once (the clock never moves), but
/// one that asked to wait while the pool drains waits on, through a
/// return, and is granted when the drain ends.
pub async fn drain_fails_waiters_at_once_unless_they_wait_while_draining(f: Fixture) {
    let pool = f.pool("p");
    pool.register(1).await.unwrap();
    let held = pool.borrow(TTL, Duration::ZERO).await.unwrap().forget();
    let plain = {
        let pool = pool.clone();
        tokio::spawn(async move { pool.borrow(TTL, LONG).await.map(|g| g.forget()) })
    };
    until_waiting(&pool, 1).await;
    let patient = {
        let pool = pool.clone();
        let options = BorrowOptions::new().wait_while_draining(true);
        tokio::spawn(async move {
            pool.borrow_with(TTL, LONG, options)
                .await
                .map(|g| g.forget())
        })
    };
    until_waiting(&pool, 2).await;
    pool.set_draining(true).await.unwrap();
    let failed = plain.await.unwrap().unwrap_err();
    assert!(draining(&failed), "{failed:?}");
    until_waiting(&pool, 1).await;
    assert!(pool.return_lease(held.id).await.unwrap());
    tokio::task::yield_now().await;
    assert_eq!(
        pool.waiting().count,
        1,
        "the patient borrower waits through the drain"
    );
    assert_eq!(pool.inspect().await.unwrap().in_use, 0, "and took nothing");
    pool.set_draining(false).await.unwrap();
    let lease = patient
        .await
        .unwrap()
        .expect("granted once the drain ended");
    assert_eq!(lease.position, 0);
}

/// A head that waits while the pool drains holds back no one from failing:
/// a borrower queued behind it, and one that comes during the drain, fail
/// with `Draining` at once (the clock never moves), not at the end of
/// their wait; the head is granted when the drain ends.
pub async fn drain_fails_borrowers_behind_a_head_that_waits_it_out(f: Fixture) {
    let pool = f.pool("p");
    pool.register(1).await.unwrap();
    let held = pool.borrow(TTL, Duration::ZERO).await.unwrap().forget();
    let patient = {
        let pool = pool.clone();
        let options = BorrowOptions::new().wait_while_draining(true);
        tokio::spawn(async move {
            pool.borrow_with(TTL, LONG, options)
                .await
                .map(|g| g.forget())
        })
    };
    until_waiting(&pool, 1).await;
    let plain = {
        let pool = pool.clone();
        tokio::spawn(async move { pool.borrow(TTL, LONG).await.map(|g| g.forget()) })
    };
    until_waiting(&pool, 2).await;
    pool.set_draining(true).await.unwrap();
    let failed = plain.await.unwrap().unwrap_err();
    assert!(draining(&failed), "{failed:?}");
    let late = pool.borrow(TTL, LONG).await.map(|g| g.forget());
    assert!(matches!(&late, Err(e) if draining(e)), "{late:?}");
    assert_eq!(pool.waiting().count, 1, "the head waits through the drain");
    pool.set_draining(false).await.unwrap();
    assert!(pool.return_lease(held.id).await.unwrap());
    let lease = patient
        .await
        .unwrap()
        .expect("granted once the drain ended");
    assert_eq!(lease.position, 0);
}

/// A borrow that does not wait, on a draining pool whose queue holds a
/// head that waits the drain out, fails with `Draining`, as one that waits
/// does, not `Exhausted`: before a return, and after one (which tells the
/// queue of a change) too (rule "Drain").
pub async fn drain_fails_a_borrow_without_a_wait_behind_a_head_that_waits_it_out(f: Fixture) {
    let pool = f.pool("p");
    pool.register(2).await.unwrap();
    let held: Vec<_> = [
        pool.try_borrow(TTL).await.unwrap().forget(),
        pool.try_borrow(TTL).await.unwrap().forget(),
    ]
    .into();
    let patient = {
        let pool = pool.clone();
        let options = BorrowOptions::new().wait_while_draining(true).slots(2);
        tokio::spawn(async move {
            pool.borrow_with(TTL, LONG, options)
                .await
                .map(|g| g.forget())
        })
    };
    until_waiting(&pool, 1).await;
    pool.set_draining(true).await.unwrap();
    for held in &held {
        let refused = pool.try_borrow(TTL).await.map(|g| g.forget());
        assert!(matches!(&refused, Err(e) if draining(e)), "{refused:?}");
        let refused = pool
            .borrow_with(TTL, Duration::ZERO, BorrowOptions::new().slots(1))
            .await
            .map(|g| g.forget());
        assert!(matches!(&refused, Err(e) if draining(e)), "{refused:?}");
        assert!(pool.return_lease(held.id).await.unwrap(), "returns go on");
    }
    let refused = pool.try_borrow(TTL).await.map(|g| g.forget());
    assert!(matches!(&refused, Err(e) if draining(e)), "{refused:?}");
    assert_eq!(pool.inspect().await.unwrap().in_use, 0, "nothing taken");
    pool.set_draining(false).await.unwrap();
    let lease = patient
        .await
        .unwrap()
        .expect("granted once the drain ended");
    assert_eq!(&lease.positions[..], &[0, 1]);
}

/// A multi-pool borrow that names a draining pool fails whole, naming it,
/// and takes nothing from the others.
pub async fn borrow_all_fails_whole_on_a_draining_pool(f: Fixture) {
    let (a, b) = (f.pool("a"), f.pool("b"));
    a.register(1).await.unwrap();
    b.register(1).await.unwrap();
    b.set_draining(true).await.unwrap();
    let both = PoolSet::new([a.clone(), b.clone()]).unwrap();
    match both.borrow(TTL, Duration::ZERO).await {
        Err(Error::Draining { pool }) => assert_eq!(pool, PoolId::from_name("b")),
        other => panic!("{other:?}"),
    }
    assert_eq!(a.inspect().await.unwrap().in_use, 0);
}
