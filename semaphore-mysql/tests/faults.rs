//! Faults on a real server: every connection killed and a
//! restart, each on a throwaway server of its own; a borrow whose answer
//! was lost, sent again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use semaphore_mysql::testing::TestServer;
use semaphore_mysql::{BorrowOptions, Error, MysqlOptions, MysqlStore, Pool, PoolId};

const TTL: Duration = Duration::from_secs(60);

async fn store(server: &TestServer) -> Arc<MysqlStore> {
    let options = MysqlOptions::default().table_prefix(TestServer::fresh_prefix());
    Arc::new(
        MysqlStore::connect_with(server.url(), options)
            .await
            .expect("a store on the throwaway server"),
    )
}

fn retryable(e: &Error) -> bool {
    matches!(
        e,
        Error::Storage {
            retryable: true,
            ..
        }
    )
}

/// Retries `call` while it fails retryably (the server is coming back).
async fn retry<T, F: std::future::Future<Output = Result<T, Error>>>(
    mut call: impl FnMut() -> F,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match call().await {
            Ok(value) => return value,
            Err(e) if retryable(&e) && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
}

/// Every connection of the store killed (`KILL`), its holder's and its
/// session's included: calls fail retryably or go through on a new
/// connection, never with `Exhausted`; a connection's loss ends no session,
/// so the bound lease stays held and its holder still holds
/// it; the holder connection comes back under another lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_connections_fail_retryably_and_end_no_session() {
    let server = TestServer::start().unwrap();
    let store = store(&server).await;
    let pool = Pool::new(store.clone(), PoolId::from_name("p"));
    pool.register(3).await.unwrap();
    let unbound_options = BorrowOptions::new().bound(false);
    let unbound = pool
        .borrow_with(TTL, Duration::ZERO, unbound_options)
        .await
        .unwrap()
        .forget();
    let bound = pool.try_borrow(TTL).await.unwrap();
    let before = store.link_id().expect("a link");
    let ids = server.sql(
        "SELECT ID FROM information_schema.PROCESSLIST \
         WHERE ID <> CONNECTION_ID() AND USER = 'root'",
    );
    for id in ids.lines() {
        // Killing the link ends its bell's connection too: that one may
        // be gone (1094, unknown thread) by its turn.
        if let Err(e) = server.try_sql(&format!("KILL {id}")) {
            assert!(e.contains("1094"), "KILL {id}: {e}");
        }
    }
    let state = retry(|| pool.inspect()).await;
    assert_eq!(state.in_use, 2, "both leases are held: {state:?}");
    let holders = retry(|| pool.holders()).await;
    assert_eq!(holders.len(), 2);
    assert!(holders.iter().any(|h| h.lease.id == unbound.id));
    assert!(
        bound.is_held(),
        "the holder was told it lost a lease it kept"
    );
    // The link reconnects, under another lock.
    let deadline = Instant::now() + Duration::from_secs(30);
    while store.link_id().is_none_or(|now| now == before) {
        assert!(Instant::now() < deadline, "the link did not come back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // One more fits in the three slots, and no other.
    let third = retry(|| pool.try_borrow(TTL)).await;
    assert_eq!(third.position, 2);
    assert!(matches!(
        pool.try_borrow(TTL).await,
        Err(Error::Exhausted { .. })
    ));
    assert!(
        retry(|| bound.pool().return_lease(bound.id)).await,
        "it lived"
    );
}

/// A restart (SIGKILL, then start on the same data) within the session
/// timeout: calls fail retryably while the server is down; afterwards both
/// leases are still held (InnoDB kept them, and the session lives),
/// the bound one's holder still holds it, tokens keep growing,
/// and a borrower that waited through the restart is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_keeps_leases_and_tokens_and_waiters_are_served_after_it() {
    let server = TestServer::start().unwrap();
    let store = store(&server).await;
    let pool = Pool::new(store.clone(), PoolId::from_name("p"));
    pool.register(2).await.unwrap();
    let unbound = pool
        .borrow_with(TTL, Duration::ZERO, BorrowOptions::new().bound(false))
        .await
        .unwrap()
        .forget();
    let bound = pool.try_borrow(TTL).await.unwrap();
    server.restart();
    let state = retry(|| pool.inspect()).await;
    assert_eq!(state.in_use, 2, "both leases survive: {state:?}");
    assert!(
        bound.is_held(),
        "the holder was told it lost a lease it kept"
    );
    let waiter = {
        let pool = pool.clone();
        tokio::spawn(async move {
            pool.borrow(TTL, Duration::from_secs(60))
                .await
                .map(|g| g.forget())
        })
    };
    while pool.waiting().count == 0 {
        assert!(!waiter.is_finished(), "{:?}", waiter.await);
        tokio::task::yield_now().await;
    }
    assert!(retry(|| pool.return_lease(unbound.id)).await);
    let served = waiter.await.unwrap().expect("served after the restart");
    assert_eq!(served.position, unbound.position);
    assert!(served.token > bound.token && bound.token > unbound.token);
}

/// A borrow whose answer was lost (its connection broke after the server
/// ran it) is sent again with the same lease id: it gets the lease it was
/// granted, not a second one, so that retrying on a closed connection is
/// safe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_borrow_sent_twice_with_one_lease_id_grants_once() {
    use semaphore_mysql::store::{BorrowRequest, Store, TryBorrow};
    let store = store(TestServer::shared()).await;
    let pool = PoolId::from_name("p");
    store.register(pool, 4).await.unwrap();
    let mut request = BorrowRequest::new(pool, semaphore_mysql::LeaseId::new(), TTL);
    request.slots = 2;
    let TryBorrow::Granted { lease: first } = store.try_borrow(&request).await.unwrap() else {
        panic!("a free pool refused");
    };
    let TryBorrow::Granted { lease: again } = store.try_borrow(&request).await.unwrap() else {
        panic!("the repeat was refused");
    };
    assert_eq!(first, again);
    assert_eq!(store.inspect(pool).await.unwrap().in_use, 2);
}
