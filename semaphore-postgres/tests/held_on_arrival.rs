//! A handed slot is held on arrival (rule "A handed slot is held on
//! arrival"): the return that hands a slot to the head of another process
//! sends the lease in its wake-up's notification, and the head holds it
//! before any transaction of its own takes it. The head's process connects
//! as a role of its own whose rights to take a handed slot
//! (`semaphore_take_handed`, which its look calls, and
//! `semaphore_confirm_handed`, its confirmation) are taken away once it is
//! queued. Until its confirmation lands, the
//! holder's local deadline is the lease's liveness bound.

use std::sync::Arc;
use std::time::Duration;

use semaphore_postgres::testing::TestServer;
use semaphore_postgres::tokio_postgres::{self, NoTls};
use semaphore_postgres::{ManualClock, Pool, PoolId, PostgresOptions, PostgresStore};

const TTL: Duration = Duration::from_secs(30);

/// What a test of a hand-off holds: the server, its owner's connection,
/// the shared manual clock, the schema, and the head's guard, handed the
/// slot while it could neither take it nor confirm it.
struct HandedOff {
    /// Kept to the test's end (a pattern's `..` would drop it at once).
    _server: TestServer,
    /// The store whose return handed the slot.
    _here: Arc<PostgresStore>,
    owner: tokio_postgres::Client,
    clock: Arc<ManualClock>,
    schema: String,
    guard: semaphore_postgres::LeaseGuard<Pool>,
}

/// Another process's head is handed the slot by a return here, while its
/// role may neither take nor confirm a handed slot.
async fn hand_off() -> HandedOff {
    let server = TestServer::start().unwrap();
    let schema = TestServer::fresh_schema();
    let (owner, connection) = tokio_postgres::connect(server.url(), NoTls).await.unwrap();
    tokio::spawn(connection);
    let clock = Arc::new(ManualClock::new());
    let options = || {
        PostgresOptions::default()
            .schema(&schema)
            .manual_clock(clock.clone())
    };
    let here = Arc::new(
        PostgresStore::connect_with(server.url(), options())
            .await
            .unwrap(),
    );
    owner.batch_execute("CREATE ROLE head LOGIN").await.unwrap();
    owner
        .batch_execute(&PostgresStore::grants(&schema, "head").unwrap())
        .await
        .unwrap();
    let head_url = format!("{} user=head", server.url());
    let there = Arc::new(
        PostgresStore::connect_with(&head_url, options().migrate(false))
            .await
            .unwrap(),
    );
    let id = PoolId::from_name("held on arrival");
    let (mine, theirs) = (Pool::new(here.clone(), id), Pool::new(there, id));
    mine.register(1).await.unwrap();
    assert_eq!(
        theirs.limits().handed_bound,
        Some(Duration::from_secs(1)),
        "the bound the holder's deadline is, stated"
    );
    let held = mine.borrow(TTL, Duration::ZERO).await.unwrap();
    let waiting = theirs.clone();
    let waiter =
        tokio::spawn(async move { theirs.borrow_owned(TTL, Duration::from_secs(600)).await });
    semaphore_core::conformance::until_waiting(&waiting, 1).await;
    while here.queue_heads(id).await.unwrap() == 0 {
        tokio::task::yield_now().await;
    }

    // From here the head's process cannot take the slot.
    owner
        .batch_execute(&format!(
            "REVOKE EXECUTE ON FUNCTION \"{schema}\".semaphore_take_handed(uuid, uuid, bigint, bigint)
                 FROM head, PUBLIC;
             REVOKE EXECUTE ON FUNCTION
                 \"{schema}\".semaphore_confirm_handed(uuid, uuid, uuid, bigint, bigint)
                 FROM head, PUBLIC"
        ))
        .await
        .unwrap();
    assert!(held.release().await.unwrap());
    let guard = waiter.await.unwrap().expect("handed the slot");
    HandedOff {
        _server: server,
        _here: here,
        owner,
        clock,
        schema,
        guard,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_slot_is_held_on_arrival_and_bounded_until_confirmed() {
    let HandedOff {
        _server,
        _here,
        owner,
        clock,
        schema,
        guard,
    } = hand_off().await;
    let place = format!("SELECT count(*) FROM \"{schema}\".semaphore_waiters");
    let places: i64 = owner.query_one(&place, &[]).await.unwrap().get(0);
    let held_now = guard.is_held();
    // What a holder reads until the confirmation lands: the session
    // vouches no longer than the bound (1 s after the hand-off).
    clock.advance(Duration::from_millis(1100));
    let held_past_bound = guard.is_held();
    assert_eq!(places, 1, "the server recorded a take before the head held");
    assert!(held_now, "the head holds from the notification's arrival");
    assert!(
        !held_past_bound,
        "an unconfirmed handed lease is held past its liveness bound"
    );
    // Its holder returns it unconfirmed: the head's place goes with it,
    // and holds back no one.
    guard.release().await.unwrap();
    let places: i64 = owner.query_one(&place, &[]).await.unwrap().get(0);
    assert_eq!(places, 0, "the served head's place outlived its lease");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_lease_counts_its_ttl_once_its_confirmation_lands() {
    let HandedOff {
        _server,
        _here,
        owner,
        schema,
        guard,
        ..
    } = hand_off().await;
    assert!(
        guard.time_left() <= Duration::from_secs(1),
        "an unconfirmed handed lease counts past its bound"
    );
    {
        let mut confirmed = std::pin::pin!(guard.confirmed());
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(
            std::future::Future::poll(confirmed.as_mut(), &mut cx).is_pending(),
            "confirmed before any confirmation could land"
        );
        // The head's process may confirm again: its retries land.
        owner
            .batch_execute(&format!(
                "GRANT EXECUTE ON FUNCTION
                     \"{schema}\".semaphore_confirm_handed(uuid, uuid, uuid, bigint, bigint)
                     TO head"
            ))
            .await
            .unwrap();
        confirmed.await;
    }
    assert!(guard.is_held(), "the confirmed lease is not held");
    assert!(
        guard.time_left() > Duration::from_secs(20),
        "a confirmed handed lease still counts to its bound: {:?}",
        guard.time_left()
    );
    assert!(guard.release().await.unwrap());
}
