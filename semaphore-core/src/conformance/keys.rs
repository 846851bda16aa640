//! Cases for idempotency keys, owner labels, the admin listing, forced
//! returns and the waiter count (rule "Beyond the basic model").

use std::sync::Arc;
use std::time::Duration;

use super::gate::{GatedStore, Stop};
use super::{Fixture, SEC, spawn_borrow, until_in_use, until_waiting};
use crate::{error::Error, id::PoolId, limits::Limits, options::BorrowOptions, pool::Pool};

fn key(k: &str) -> BorrowOptions {
    BorrowOptions::new().key(k)
}

/// A retry after a lost reply: borrow with a key, drop the result (the
/// reply never arrived), borrow again with the key: the same lease, and no
/// second slot taken, even with the pool full.
pub async fn key_retry_after_a_lost_reply_returns_the_same_lease(f: Fixture) {
    let pool = f.pool("p");
    pool.register(1).await.unwrap();
    let lost = pool
        .borrow_with(SEC * 30, Duration::ZERO, key("job-1"))
        .await
        .unwrap()
        .forget();
    f.clock.advance(SEC * 2);
    for _ in 0..3 {
        let retry = pool
            .borrow_with(SEC * 30, Duration::ZERO, key("job-1"))
            .await
            .unwrap()
            .forget();
        assert_eq!(retry, lost, "same id, position, token and expiry");
    }
    assert_eq!(pool.inspect().await.unwrap().in_use, 1);
    let err = pool.borrow(SEC, Duration::ZERO).await.unwrap_err();
    assert!(matches!(err, Error::Exhausted { .. }), "{err:?}");
}

/// R12 with a key: a retry dropped in its store call, which the store
/// answers with the key's lease, does not return that lease. It is the
/// first borrow's, and its caller may still be using it.
pub async fn key_retry_dropped_in_its_store_call_keeps_the_lease(f: Fixture) {
    let gated = Arc::new(GatedStore::new(f.store.clone()));
    let pool = Pool::new(gated.clone(), PoolId::from_name("p"));
    pool.register(1).await.unwrap();
    let first = pool
        .borrow_with(SEC * 30, Duration::ZERO, key("job-9"))
        .await
        .unwrap()
        .forget();
    gated.arm(Stop::BeforeCall);
    gated.drop_at_gate(pool.borrow_with(SEC * 30, Duration::ZERO, key("job-9")));
    gated.release();
    gated.until_quiet().await;
    let holders = pool.holders().await.unwrap();
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].lease, first);
}

/// Once the keyed lease is returned or expired, the key borrows anew: a new
/// lease with a larger token. Keys are per pool.
pub async fn key_borrows_anew_after_return_or_expiry_and_is_per_pool(f: Fixture) {
    let pool = f.pool("p");
    pool.register(2).await.unwrap();
    let first = pool
        .borrow_with(SEC * 5, Duration::ZERO, key("k"))
        .await
        .unwrap()
        .forget();
    assert!(pool.return_lease(first.id).await.unwrap());
    let second = pool
        .borrow_with(SEC * 5, Duration::ZERO, key("k"))
        .await
        .unwrap()
        .forget();
    assert!(second.id != first.id && second.token > first.token);
    f.clock.advance(SEC * 5);
    let third = pool
        .borrow_with(SEC * 5, Duration::ZERO, key("k"))
        .await
        .unwrap()
        .forget();
    assert!(third.id != second.id && third.token > second.token);

    let other = f.pool("other");
    other.register(1).await.unwrap();
    let there = other
        .borrow_with(SEC * 5, Duration::ZERO, key("k"))
        .await
        .unwrap()
        .forget();
    assert!(there.id != third.id);
    assert_eq!(pool.inspect().await.unwrap().in_use, 1);
}

/// A keyed retry does not queue behind this process's waiters for a lease
/// it already holds.
pub async fn key_retry_does_not_wait_behind_queued_borrowers(f: Fixture) {
    let pool = f.pool("p");
    pool.register(1).await.unwrap();
    let held = pool
        .borrow_with(SEC * 60, Duration::ZERO, key("mine"))
        .await
        .unwrap()
        .forget();
    let waiter = spawn_borrow(&pool, SEC, SEC * 3600);
    until_waiting(&pool, 1).await;
    let retry = pool
        .borrow_with(SEC * 60, Duration::ZERO, key("mine"))
        .await
        .unwrap()
        .forget();
    assert_eq!(retry, held);
    waiter.abort();
}

/// rule "Idempotency keys are atomic": sixteen borrowers
/// race with one key and two request digests. One lease is granted; each
/// borrower with its digest gets that very lease, each with the other is
/// refused with `KeyReused`, as is a borrow with no digest, also queued
/// behind a waiter; the listing shows the key without its digest. Once the
/// lease is returned, the other digest may have the key.
pub async fn key_is_kept_with_its_request_digest_atomically(f: Fixture) {
    let pool = f.pool("p");
    pool.register(3).await.unwrap();
    let keyed = |digest: u128| key("job-9").request_digest(digest);
    let racers: Vec<_> = (0..16u128)
        .map(|i| {
            let (pool, options) = (pool.clone(), keyed(i % 2));
            tokio::spawn(async move {
                let answer = pool.borrow_with(SEC * 60, Duration::ZERO, options).await;
                (i % 2, answer.map(|g| g.forget()))
            })
        })
        .collect();
    let mut granted = Vec::new();
    let mut refused = Vec::new();
    for racer in racers {
        match racer.await.unwrap() {
            (digest, Ok(lease)) => granted.push((digest, lease)),
            (digest, Err(Error::KeyReused { .. })) => refused.push(digest),
            (_, Err(e)) => panic!("neither the lease nor KeyReused: {e:?}"),
        }
    }
    let (winner, lease) = granted[0].clone();
    assert!(
        granted.iter().all(|g| g == &(winner, lease.clone())),
        "{granted:?}"
    );
    assert!(refused.iter().all(|d| *d != winner), "{refused:?}");
    assert_eq!(granted.len() + refused.len(), 16);
    assert_eq!(pool.inspect().await.unwrap().in_use, 1);
    let plain = pool
        .borrow_with(SEC * 60, Duration::ZERO, key("job-9"))
        .await;
    assert!(matches!(plain, Err(Error::KeyReused { .. })), "{plain:?}");
    let holders = pool.holders().await.unwrap();
    assert_eq!(holders[0].key.as_deref(), Some("job-9"));
    // Behind a waiter, the keyed retry is answered without queueing.
    let _rest = (
        pool.borrow(SEC * 60, Duration::ZERO)
            .await
            .unwrap()
            .forget(),
        pool.borrow(SEC * 60, Duration::ZERO)
            .await
            .unwrap()
            .forget(),
    );
    let waiter = spawn_borrow(&pool, SEC, SEC * 3600);
    until_waiting(&pool, 1).await;
    let other = pool
        .borrow_with(SEC * 60, SEC * 3600, keyed(1 - winner))
        .await;
    assert!(matches!(other, Err(Error::KeyReused { .. })), "{other:?}");
    let again = pool.borrow_with(SEC * 60, SEC * 3600, keyed(winner)).await;
    assert_eq!(again.unwrap().forget(), lease);
    // Gone before the return: a waiter still running when aborted would
    // otherwise be handed the freed slot and finish with it, forgotten.
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    assert!(pool.return_lease(lease.id).await.unwrap());
    let anew = pool
        .borrow_with(SEC * 60, SEC * 3600, keyed(1 - winner))
        .await
        .unwrap()
        .forget();
    assert_ne!(anew.id, lease.id);
}

/// The admin listing shows every active lease by position, with its owner
/// label, key, token, expiry and id; inspect shows only figures.
pub async fn holders_lists_active_leases_with_owner_labels(f: Fixture) {
    let pool = f.pool("p");
    pool.register(3).await.unwrap();
    let a = pool
        .borrow_with(
            SEC * 10,
            Duration::ZERO,
            BorrowOptions::new().owner("host-a/41"),
        )
        .await
        .unwrap()
        .forget();
    let b = pool
        .borrow(SEC * 20, Duration::ZERO)
        .await
        .unwrap()
        .forget();
    let c = pool
        .borrow_with(SEC * 30, Duration::ZERO, key("c").owner("host-c/7"))
        .await
        .unwrap()
        .forget();
    assert!(pool.return_lease(b.id).await.unwrap());
    let listed = pool.holders().await.unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].lease, a);
    assert_eq!(listed[0].owner.as_deref(), Some("host-a/41"));
    assert_eq!(listed[0].key, None);
    assert_eq!(listed[1].lease, c);
    assert_eq!(
        (listed[1].owner.as_deref(), listed[1].key.as_deref()),
        (Some("host-c/7"), Some("c"))
    );
    f.clock.advance(SEC * 10);
    let listed = pool.holders().await.unwrap();
    assert_eq!(
        listed.iter().map(|h| h.lease.position).collect::<Vec<_>>(),
        [2]
    );
    let err = f.pool("none").holders().await.unwrap_err();
    assert!(matches!(err, Error::PoolNotFound { .. }), "{err:?}");
}

/// Owner labels and keys that are empty, too long or hold control
/// characters are refused, naming the field and range; nothing changes.
pub async fn labels_out_of_range_are_refused_and_nothing_changes(f: Fixture) {
    let pool = f.pool("p");
    pool.register(1).await.unwrap();
    let cases = [
        (BorrowOptions::new().owner("x".repeat(65)), "owner"),
        (BorrowOptions::new().owner(""), "owner"),
        (BorrowOptions::new().owner("two\nlines"), "owner"),
        (key(&"k".repeat(256)), "key"),
        (key(""), "key"),
    ];
    for (options, named) in cases {
        match pool.borrow_with(SEC, Duration::ZERO, options).await {
            Err(Error::InvalidArgument { field, allowed, .. }) => {
                assert_eq!(field, named);
                assert!(allowed.starts_with("1..="), "{allowed}");
            }
            other => panic!("expected InvalidArgument for {named}, got {other:?}"),
        }
    }
    assert_eq!(pool.inspect().await.unwrap().in_use, 0);
    let tight = pool
        .clone()
        .with_limits(Limits::default().with_max_owner_len(4));
    assert!(
        tight
            .borrow_with(SEC, Duration::ZERO, BorrowOptions::new().owner("abcde"))
            .await
            .is_err()
    );
    let fits = tight
        .borrow_with(SEC, Duration::ZERO, BorrowOptions::new().owner("abcd"))
        .await;
    assert!(fits.is_ok(), "{fits:?}");
}

/// A forced return ends the lease at a position, whoever holds it: the
/// slot is free at once, a waiter is woken, and the former holder's return
/// reports false.
pub async fn force_return_frees_a_position_and_wakes_a_waiter(f: Fixture) {
    let pool = f.pool("p");
    pool.register(1).await.unwrap();
    let stuck = pool
        .borrow_with(
            SEC * 3600,
            Duration::ZERO,
            BorrowOptions::new().owner("hung-worker"),
        )
        .await
        .unwrap()
        .forget();
    let waiter = spawn_borrow(&pool, SEC, SEC * 3600);
    until_waiting(&pool, 1).await;
    let ended = pool.force_return(0).await.unwrap().expect("a lease at 0");
    assert_eq!(ended.lease, stuck);
    assert_eq!(ended.owner.as_deref(), Some("hung-worker"));
    let next = waiter.await.unwrap().unwrap();
    assert_eq!(next.position, 0);
    assert!(next.token > stuck.token);
    assert!(!pool.return_lease(stuck.id).await.unwrap());
    assert!(
        pool.force_return(5).await.unwrap().is_none(),
        "no lease at 5"
    );
    let err = f.pool("none").force_return(0).await.unwrap_err();
    assert!(matches!(err, Error::PoolNotFound { .. }), "{err:?}");
}

/// The waiter count is the number of borrowers queued on the pool in this
/// process, and drops as they leave.
pub async fn waiting_counts_queued_borrowers(f: Fixture) {
    let pool = f.pool("p");
    pool.register(1).await.unwrap();
    let held = pool.borrow(SEC * 60, Duration::ZERO).await.unwrap();
    assert_eq!(pool.waiting().count, 0);
    let waiters: Vec<_> = (0..3)
        .map(|_| spawn_borrow(&pool, SEC, SEC * 3600))
        .collect();
    until_waiting(&pool, 3).await;
    waiters[2].abort();
    until_waiting(&pool, 2).await;
    drop(held);
    until_waiting(&pool, 1).await;
    until_in_use(&pool, 1).await;
    for w in waiters {
        w.abort();
    }
    until_waiting(&pool, 0).await;
}
