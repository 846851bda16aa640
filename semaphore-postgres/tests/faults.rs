//! Faults on a real server: a restart mid-run, the
//! listener's connection killed, a statement timeout, the connection pool
//! exhausted. Each gives a retryable storage error (never `Exhausted`),
//! over-issues nothing, and the store recovers by itself.

use std::sync::Arc;
use std::time::Duration;

use semaphore_core::conformance::{until_in_use, until_waiting};
use semaphore_postgres::testing::TestServer;
use semaphore_postgres::{BorrowOptions, Error, Pool, PoolId, PostgresOptions, PostgresStore};

const TTL: Duration = Duration::from_secs(60);
const WAIT: Duration = Duration::from_secs(30);

async fn store(url: &str, schema: &str, options: PostgresOptions) -> Arc<PostgresStore> {
    let options = options
        .schema(schema)
        .poll_interval(Duration::from_millis(200));
    Arc::new(PostgresStore::connect_with(url, options).await.unwrap())
}

fn retryable_storage(err: &Error) -> bool {
    matches!(
        err,
        Error::Storage {
            retryable: true,
            ..
        }
    ) && err.is_retryable()
}

/// Retries `call` while it fails with a retryable storage error.
async fn retry<T, F: std::future::Future<Output = Result<T, Error>>>(
    mut call: impl FnMut() -> F,
) -> T {
    for _ in 0..200 {
        match call().await {
            Ok(out) => return out,
            Err(e) if retryable_storage(&e) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("a non-retryable error after a fault: {e:?}"),
        }
    }
    panic!("the store did not recover in 10 s");
}

/// `call`'s first answer that is not a retryable storage error.
async fn retry_storage<T, F: std::future::Future<Output = Result<T, Error>>>(
    mut call: impl FnMut() -> F,
) -> Result<T, Error> {
    for _ in 0..200 {
        match call().await {
            Err(e) if retryable_storage(&e) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => return other,
        }
    }
    panic!("the store did not recover in 10 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_fails_calls_retryably_then_waiters_are_served() {
    let server = TestServer::start().unwrap();
    let schema = TestServer::fresh_schema();
    let store = store(server.url(), &schema, PostgresOptions::default()).await;
    let pool = Pool::new(store.clone(), PoolId::from_name("p"));
    pool.register(1).await.unwrap();
    // Not bound to the session, which the restart ends (see the next
    // test for a bound one).
    let unbound = semaphore_postgres::BorrowOptions::new().bound(false);
    let held = pool
        .borrow_with(TTL, Duration::ZERO, unbound)
        .await
        .unwrap()
        .forget();
    let waiter = {
        let pool = pool.clone();
        tokio::spawn(async move { pool.borrow(TTL, WAIT).await.map(|g| g.forget()) })
    };
    until_waiting(&pool, 1).await;

    tokio::task::block_in_place(|| server.restart());
    // The pooled connections died with the old server: the first calls may
    // fail, always as retryable storage errors, never as Exhausted.
    match pool.inspect().await {
        Ok(state) => assert_eq!(state.in_use, 1),
        Err(e) => assert!(retryable_storage(&e), "{e:?}"),
    }
    assert!(retry(|| pool.return_lease(held.id)).await);
    let next = waiter
        .await
        .unwrap()
        .expect("the waiter was not served after the restart");
    assert_eq!(next.position, 0);
    assert!(next.token > held.token);
    assert_eq!(retry(|| pool.inspect()).await.in_use, 1);
}

/// A server restart with the data intact ends no session.
/// A bound lease outlives the restart and twice the session timeout after
/// it: its holder still holds it (the heartbeat landed again), and a
/// borrower that waits that long is refused; once the holder lets go, the
/// borrower is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_keeps_the_session_and_its_bound_leases() {
    let server = TestServer::start().unwrap();
    let schema = TestServer::fresh_schema();
    let timeout = Duration::from_secs(2);
    let options = PostgresOptions::default().session_timeout(timeout);
    let store = store(server.url(), &schema, options).await;
    let pool = Pool::new(store.clone(), PoolId::from_name("p"));
    pool.register(1).await.unwrap();
    let held = pool.try_borrow(TTL).await.unwrap();
    tokio::task::block_in_place(|| server.restart());
    let refused = retry_storage(|| pool.borrow(TTL, timeout * 2)).await;
    assert!(
        matches!(refused, Err(Error::Exhausted { .. })),
        "the lease was taken from its live holder: {refused:?}"
    );
    assert!(
        held.is_held(),
        "the holder was told it lost a lease it kept"
    );
    drop(held);
    let next = retry(|| pool.borrow(TTL, WAIT)).await;
    assert_eq!(next.position, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_listener_reconnects_and_waiters_are_still_woken() {
    let server = TestServer::shared();
    let schema = TestServer::fresh_schema();
    let here = store(server.url(), &schema, PostgresOptions::default()).await;
    let there = store(server.url(), &schema, PostgresOptions::default()).await;
    let id = PoolId::from_name("p");
    let (pool, other) = (Pool::new(here.clone(), id), Pool::new(there.clone(), id));
    pool.register(1).await.unwrap();
    let held = other.try_borrow(TTL).await.unwrap().forget();
    let waiter = {
        let pool = pool.clone();
        tokio::spawn(async move { pool.borrow(TTL, WAIT).await.map(|g| g.forget()) })
    };
    until_waiting(&pool, 1).await;

    let backend = loop {
        match here.listener_backend() {
            Some(pid) => break pid,
            None => tokio::task::yield_now().await,
        }
    };
    let client = there.connection_pool().get().await.unwrap();
    let killed: bool = client
        .query_one("SELECT pg_terminate_backend($1)", &[&backend])
        .await
        .unwrap()
        .get(0);
    assert!(killed);
    drop(client);
    // Another process's return must still reach the waiter.
    assert!(other.return_lease(held.id).await.unwrap());
    let next = waiter.await.unwrap().expect("the waiter was not woken");
    assert_eq!(next.position, 0);
    // The listener came back under a new backend.
    while here.listener_backend().is_none_or(|pid| pid == backend) {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_timeout_is_a_retryable_error_and_changes_nothing() {
    let server = TestServer::shared();
    let schema = TestServer::fresh_schema();
    let url = format!("{} options='-c statement_timeout=300'", server.url());
    let store = store(&url, &schema, PostgresOptions::default()).await;
    let pool = Pool::new(store.clone(), PoolId::from_name("p"));
    pool.register(1).await.unwrap();

    // Another session locks the pool and slot tables, so the borrow waits
    // on the lock until the statement times out.
    let (mut locker, connection) = tokio_postgres_connect(server.url()).await;
    let tx = locker.transaction().await.unwrap();
    tx.batch_execute(&format!(
        "LOCK TABLE \"{schema}\".semaphore_pools, \"{schema}\".semaphore_slots IN EXCLUSIVE MODE"
    ))
    .await
    .unwrap();
    let err = pool.try_borrow(TTL).await.unwrap_err();
    assert!(retryable_storage(&err), "{err:?}");
    assert!(err.to_string().contains("borrow"), "{err}");
    tx.rollback().await.unwrap();
    drop((locker, connection));

    assert_eq!(
        pool.inspect().await.unwrap().in_use,
        0,
        "the timed-out borrow left a lease"
    );
    assert_eq!(pool.try_borrow(TTL).await.unwrap().position, 0);
}

/// with no timeout of the caller's own, a borrow behind an
/// outside session's row lock (the pool's row, held in an open
/// transaction) gives a retryable error after the store's lock timeout
/// (5 s), never a wait without bound; once the lock goes, it is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_lock_held_elsewhere_is_a_retryable_error_not_a_hang() {
    let server = TestServer::shared();
    let schema = TestServer::fresh_schema();
    let store = store(server.url(), &schema, PostgresOptions::default()).await;
    let pool = Pool::new(store.clone(), PoolId::from_name("p"));
    pool.register(1).await.unwrap();
    let (mut locker, connection) = tokio_postgres_connect(server.url()).await;
    let tx = locker.transaction().await.unwrap();
    tx.batch_execute(&format!(
        "SELECT 1 FROM \"{schema}\".semaphore_pools FOR UPDATE"
    ))
    .await
    .unwrap();
    // Keyed: the keyed borrow takes the pool row's lock.
    let keyed = BorrowOptions::new().key("k");
    let err = tokio::time::timeout(
        Duration::from_secs(60),
        pool.borrow_with(TTL, Duration::ZERO, keyed.clone()),
    )
    .await
    .expect("the borrow waited without bound behind the lock")
    .unwrap_err();
    assert!(retryable_storage(&err), "{err:?}");
    tx.rollback().await.unwrap();
    drop((locker, connection));
    let lease = pool.borrow_with(TTL, Duration::ZERO, keyed).await.unwrap();
    assert_eq!(lease.position, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exhausted_connection_pool_is_a_retryable_error_not_a_hang() {
    let server = TestServer::shared();
    let schema = TestServer::fresh_schema();
    let options = PostgresOptions::default()
        .pool_size(1)
        .pool_timeout(Duration::from_millis(200));
    let store = store(server.url(), &schema, options).await;
    let pool = Pool::new(store.clone(), PoolId::from_name("p"));
    pool.register(1).await.unwrap();

    let taken = store.connection_pool().get().await.unwrap();
    let err = pool.try_borrow(TTL).await.unwrap_err();
    assert!(retryable_storage(&err), "{err:?}");
    drop(taken);
    assert_eq!(pool.try_borrow(TTL).await.unwrap().position, 0);
    until_in_use(&pool, 0).await;
}

/// A plain connection of the test's own, its connection driven on a task.
async fn tokio_postgres_connect(
    url: &str,
) -> (tokio_postgres::Client, tokio::task::JoinHandle<()>) {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    (client, driver)
}

use semaphore_postgres::tokio_postgres;

/// A listener whose server accepts the connection and never answers (a
/// stalled server, or a `listen_url` to the wrong place): the fallback
/// poll still wakes waiters, and the listener's connect gives up and tries
/// again instead of hanging.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_polled_while_the_listener_cannot_connect() {
    let stalled = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = stalled.local_addr().unwrap().port();
    let _held = tokio::spawn(async move {
        let mut sockets = Vec::new();
        while let Ok((socket, _)) = stalled.accept().await {
            sockets.push(socket); // accepted, never answered
        }
    });
    let server = TestServer::shared();
    let schema = TestServer::fresh_schema();
    let options = PostgresOptions::default()
        .listen_url(format!("host=127.0.0.1 port={port} user=postgres"))
        .poll_interval(Duration::from_millis(50));
    let here = store(server.url(), &schema, options).await;
    let there = store(server.url(), &schema, PostgresOptions::default()).await;
    let id = PoolId::from_name("p");
    let (pool, other) = (Pool::new(here.clone(), id), Pool::new(there, id));
    pool.register(1).await.unwrap();
    let held = other.try_borrow(TTL).await.unwrap().forget();
    let waiter = {
        let pool = pool.clone();
        // Unbound: the session's heartbeat also connects by `listen_url`,
        // so this handle has no session to bind a lease to.
        let unbound = BorrowOptions::default().bound(false);
        tokio::spawn(async move {
            pool.borrow_with(TTL, Duration::from_secs(20), unbound)
                .await
                .map(|g| g.forget())
        })
    };
    // Queued in the table: its first look found the pool full.
    while here.queue_heads(id).await.unwrap() == 0 {
        if waiter.is_finished() {
            panic!("the waiter ended before it queued: {:?}", waiter.await);
        }
        tokio::task::yield_now().await;
    }
    assert!(other.return_lease(held.id).await.unwrap());
    let next = waiter
        .await
        .unwrap()
        .expect("the waiter was not woken by the poll");
    assert_eq!(next.position, 0);
}
