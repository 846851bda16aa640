//! Leases inside transactions the application owns: the lease and the
//! application's write commit or roll back together, and the store never
//! ends the transaction itself.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use semaphore_sqlite::rusqlite::{Connection, TransactionBehavior};
use semaphore_sqlite::{BorrowOptions, Error, Pool, PoolId, SqliteStore};

const TTL: Duration = Duration::from_secs(60);

struct Setup {
    _dir: tempfile::TempDir,
    store: Arc<SqliteStore>,
    pool: Pool,
    conn: Connection,
}

async fn setup(count: u32) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let store = Arc::new(SqliteStore::open(&path).unwrap());
    let pool = Pool::new(store.clone(), PoolId::from_name("jobs"));
    pool.register(count).await.unwrap();
    let conn = app_connection(&path);
    Setup {
        _dir: dir,
        store,
        pool,
        conn,
    }
}

fn app_connection(path: &Path) -> Connection {
    let conn = Connection::open(path).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    conn.execute_batch("CREATE TABLE IF NOT EXISTS jobs (slot INTEGER, token INTEGER)")
        .unwrap();
    conn
}

fn jobs(conn: &Connection) -> i64 {
    conn.query_row("SELECT COUNT(*) FROM jobs", [], |r| r.get(0))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn borrow_commits_with_the_application_write() {
    let mut s = setup(2).await;
    let tx = s
        .conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .unwrap();
    let lease = s
        .store
        .borrow_in(&tx, &s.pool, TTL, BorrowOptions::new().owner("tx"))
        .unwrap();
    tx.execute(
        "INSERT INTO jobs VALUES (?1, ?2)",
        (lease.position, lease.token as i64),
    )
    .unwrap();
    assert!(!tx.is_autocommit(), "the store ended the transaction");
    tx.commit().unwrap();
    assert_eq!(jobs(&s.conn), 1);
    let holders = s.pool.holders().await.unwrap();
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].lease, lease);
    assert_eq!(holders[0].owner.as_deref(), Some("tx"));
    assert!(s.pool.return_lease(lease.id).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolled_back_borrow_leaves_no_trace_and_its_token_is_not_granted_again() {
    let mut s = setup(1).await;
    let tx = s
        .conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .unwrap();
    let rolled_back = s
        .store
        .borrow_in(&tx, &s.pool, TTL, BorrowOptions::new().key("k"))
        .unwrap();
    tx.execute("INSERT INTO jobs VALUES (0, 0)", []).unwrap();
    tx.rollback().unwrap();
    assert_eq!(jobs(&s.conn), 0);
    assert_eq!(s.pool.inspect().await.unwrap().in_use, 0);
    assert!(s.pool.holders().await.unwrap().is_empty());

    // Neither a borrow through the pool nor another in a transaction gets
    // the rolled-back token, and the key is free again.
    let next = s.pool.try_borrow(TTL).await.unwrap();
    assert!(
        next.token > rolled_back.token,
        "token {} reused",
        next.token
    );
    assert!(next.release().await.unwrap());
    let tx = s.conn.transaction().unwrap();
    let again = s
        .store
        .borrow_in(&tx, &s.pool, TTL, BorrowOptions::new().key("k"))
        .unwrap();
    assert!(again.token > rolled_back.token && again.id != rolled_back.id);
    tx.rollback().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn return_and_renew_follow_the_transaction() {
    let mut s = setup(1).await;
    let lease = s.pool.try_borrow(TTL).await.unwrap().forget();

    let tx = s.conn.transaction().unwrap();
    assert!(s.store.return_in(&tx, &s.pool, lease.id).unwrap());
    tx.rollback().unwrap();
    assert_eq!(
        s.pool.inspect().await.unwrap().in_use,
        1,
        "the return rolled back"
    );

    let tx = s.conn.transaction().unwrap();
    let renewed = s.store.renew_in(&tx, &s.pool, &lease, TTL * 10).unwrap();
    assert_eq!(
        (renewed.position, renewed.token),
        (lease.position, lease.token)
    );
    tx.commit().unwrap();
    assert_eq!(s.pool.holders().await.unwrap()[0].lease, renewed);

    let tx = s.conn.transaction().unwrap();
    assert!(s.store.return_in(&tx, &s.pool, lease.id).unwrap());
    tx.commit().unwrap();
    assert_eq!(s.pool.inspect().await.unwrap().in_use, 0);
    let tx = s.conn.transaction().unwrap();
    let err = s.store.renew_in(&tx, &s.pool, &renewed, TTL).unwrap_err();
    assert!(matches!(err, Error::LeaseNotFound { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn borrow_in_a_full_pool_is_exhausted_at_once_and_the_tx_stays_usable() {
    let mut s = setup(1).await;
    let _held = s.pool.try_borrow(TTL).await.unwrap();
    let tx = s
        .conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .unwrap();
    let err = s
        .store
        .borrow_in(&tx, &s.pool, TTL, BorrowOptions::new())
        .unwrap_err();
    assert!(
        matches!(err, Error::Exhausted { waited, .. } if waited.is_zero()),
        "{err:?}"
    );
    let unknown = Pool::new(s.store.clone(), PoolId::from_name("none"));
    let err = s
        .store
        .borrow_in(&tx, &unknown, TTL, BorrowOptions::new())
        .unwrap_err();
    assert!(matches!(err, Error::PoolNotFound { .. }), "{err:?}");
    tx.execute("INSERT INTO jobs VALUES (9, 9)", []).unwrap();
    tx.commit().unwrap();
    assert_eq!(jobs(&s.conn), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_outside_a_transaction_or_the_file_and_foreign_pools_are_refused() {
    let s = setup(1).await;
    let invalid = |r: Result<_, Error>, named: &str| match r {
        Err(Error::InvalidArgument { field, .. }) => assert_eq!(field, named),
        other => panic!("expected InvalidArgument naming {named}, got {other:?}"),
    };
    invalid(
        s.store
            .borrow_in(&s.conn, &s.pool, TTL, BorrowOptions::new()),
        "tx",
    );

    let other_dir = tempfile::tempdir().unwrap();
    let mut elsewhere = app_connection(&other_dir.path().join("other.db"));
    let tx = elsewhere.transaction().unwrap();
    invalid(
        s.store.borrow_in(&tx, &s.pool, TTL, BorrowOptions::new()),
        "tx",
    );
    drop(tx);

    let other_store = Arc::new(SqliteStore::open(other_dir.path().join("b.db")).unwrap());
    let foreign = Pool::new(other_store, PoolId::from_name("jobs"));
    let mut conn = app_connection(s.store.path());
    let tx = conn.transaction().unwrap();
    invalid(
        s.store.borrow_in(&tx, &foreign, TTL, BorrowOptions::new()),
        "pool",
    );
    invalid(
        s.store
            .borrow_in(&tx, &s.pool, TTL, BorrowOptions::new().owner("")),
        "owner",
    );
    invalid(
        s.store
            .borrow_in(&tx, &s.pool, Duration::ZERO, BorrowOptions::new()),
        "ttl",
    );
    drop(tx);
    assert_eq!(s.pool.inspect().await.unwrap().in_use, 0);
}

/// Waiters in this process learn of a return committed by the
/// application's transaction through the store's file watch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_return_committed_in_a_transaction_wakes_a_waiter() {
    let mut s = setup(1).await;
    let held = s.pool.try_borrow(TTL).await.unwrap().forget();
    let waiter = {
        let pool = s.pool.clone();
        tokio::spawn(async move {
            pool.borrow(TTL, Duration::from_secs(30))
                .await
                .map(|g| g.forget())
        })
    };
    let started = std::time::Instant::now();
    while s.store.queue_heads(s.pool.id()).await.unwrap() == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the waiter never queued"
        );
        tokio::task::yield_now().await;
    }
    let tx = s.conn.transaction().unwrap();
    assert!(s.store.return_in(&tx, &s.pool, held.id).unwrap());
    tx.commit().unwrap();
    let got = waiter.await.unwrap().unwrap();
    assert_eq!(got.position, 0);
    assert_eq!(s.store.queue_heads(s.pool.id()).await.unwrap(), 0);
}
