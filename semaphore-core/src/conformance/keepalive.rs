//! Keep-alive: a lease renewed while its guard lives, and the signal when
//! a renewal finds it lost (rule "Beyond the basic model"), on the manual
//! clock.

use std::time::Duration;

use super::{Fixture, SEC};
use crate::{error::Error, guard::LeaseGuard, pool::Pool};

/// Advances the clock by `by` in steps of 100 ms, letting each renewal
/// that falls due land before the lease could expire.
async fn work(f: &Fixture, guard: &LeaseGuard<&Pool>, by: Duration) {
    let step = Duration::from_millis(100);
    for _ in 0..(by.as_millis() / step.as_millis()) {
        f.clock.advance(step);
        while !guard.is_lost() && guard.time_left() <= SEC / 2 {
            tokio::task::yield_now().await;
        }
    }
}

/// A 1 s lease with keep-alive survives 10 s of work: still held, by the
/// same lease, and nobody else gets the slot.
pub async fn keep_alive_holds_a_one_second_lease_through_ten_seconds_of_work(f: Fixture) {
    let pool = f.pool("p");
    pool.register(1).await.unwrap();
    let mut guard = pool.borrow(SEC, Duration::ZERO).await.unwrap();
    guard.keep_alive();
    work(&f, &guard, Duration::from_secs(10)).await;
    assert!(!guard.is_lost());
    let holders = pool.holders().await.unwrap();
    assert_eq!(holders.len(), 1);
    assert_eq!(
        (holders[0].lease.id, holders[0].lease.token),
        (guard.id, guard.token)
    );
    assert!(matches!(
        pool.try_borrow(SEC).await,
        Err(Error::Exhausted { .. })
    ));
    drop(guard);
    super::until_in_use(&pool, 0).await;
}

/// Borrows a 1 s lease with keep-alive, does `lose` to it, moves the clock
/// by at most one renewal interval (or past its expiry, for a stall), and
/// checks that `lost()` resolves with the reason `expect` names.
async fn lose(f: &Fixture, how: &str, expect: fn(&Error) -> bool) {
    let pool = f.pool(how);
    pool.register(1).await.unwrap();
    let mut guard = pool.borrow(SEC, Duration::ZERO).await.unwrap();
    guard.keep_alive();
    let interval = SEC / 3 + Duration::from_millis(1);
    match how {
        "forced" => drop(pool.force_return(guard.position).await.unwrap()),
        "deleted" => assert!(pool.delete().await.unwrap()),
        _ => {}
    }
    assert!(!guard.is_lost(), "{how}: lost before a renewal tried");
    let jump = if how == "stalled" { 2 * SEC } else { interval };
    f.clock.advance(jump);
    let reason = guard.lost().await;
    assert!(expect(&reason), "{how}: lost for {reason:?}");
    assert!(guard.is_lost());
    assert_eq!(guard.time_left(), Duration::ZERO);
}

/// A forced return, a deleted pool and a stall past the expiry each make
/// `lost()` resolve, with the reason, within one renewal interval.
pub async fn keep_alive_signals_each_way_of_losing_the_lease(f: Fixture) {
    lose(&f, "forced", |e| matches!(e, Error::LeaseNotFound { .. })).await;
    lose(&f, "deleted", |e| matches!(e, Error::PoolNotFound { .. })).await;
    lose(&f, "stalled", |e| matches!(e, Error::LeaseExpired { .. })).await;
}
