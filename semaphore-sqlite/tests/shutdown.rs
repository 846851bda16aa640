//! Guards dropped while their runtime shuts down are returned (a guard
//! returns its lease during shutdown too), on both write paths: group commit (`Synchronous::Full`)
//! and one transaction per write (`Synchronous::Normal`). Before, a return
//! that found the runtime's blocking pool refusing work was lost, and the
//! slot stayed held by nobody to the end of its ttl (found by a
//! hostile test).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use semaphore_sqlite::{Pool, PoolId, SqliteOptions, SqliteStore, Synchronous};

/// Longer than any wait below: a lease left to its ttl is told apart.
const TTL: Duration = Duration::from_secs(120);

fn store(path: &Path, synchronous: Synchronous) -> Arc<SqliteStore> {
    let options = SqliteOptions::default().synchronous(synchronous);
    Arc::new(SqliteStore::open_with(path, options).unwrap())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The pool's `in_use`, read by a store handle of its own.
fn in_use(path: &Path, id: PoolId) -> u32 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = Arc::new(SqliteStore::open(path).unwrap());
        Pool::new(store, id).inspect().await.unwrap().in_use
    })
}

/// `in_use` once it reaches 0, or what it is after 30 s (a quarter of the
/// ttl: a lease still held then was lost, not slow).
fn settled(path: &Path, id: PoolId) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = in_use(path, id);
        if left == 0 || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A guard dropped in the context of a runtime already shut down, whose
/// blocking pool refuses work: what a task's drop during the shutdown
/// meets.
fn dropped_after_shutdown(synchronous: Synchronous) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.db");
    let store = store(&path, synchronous);
    let id = PoolId::from_name("dropped");
    let pool = Pool::new(store.clone(), id);
    let rt = runtime();
    let guard = rt.block_on(async {
        pool.register(4).await.unwrap();
        pool.borrow_owned(TTL, Duration::ZERO).await.unwrap()
    });
    assert_eq!(in_use(&path, id), 1);
    let handle = rt.handle().clone();
    rt.shutdown_timeout(Duration::ZERO);
    {
        let _inside = handle.enter();
        drop(guard);
    }
    assert_eq!(settled(&path, id), 0, "{synchronous:?}: the lease was lost");
}

#[test]
fn a_guard_dropped_after_its_runtime_shut_down_is_returned_with_group_commit() {
    dropped_after_shutdown(Synchronous::Full);
}

#[test]
fn a_guard_dropped_after_its_runtime_shut_down_is_returned_one_write_at_a_time() {
    dropped_after_shutdown(Synchronous::Normal);
}

/// 32 tasks hold guards when their runtime is shut down without waiting:
/// every guard is dropped with its task, and every lease returned.
fn held_at_shutdown(synchronous: Synchronous) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store = store(&path, synchronous);
    let id = PoolId::from_name("held");
    for round in 0..3 {
        let rt = runtime();
        let pool = Pool::new(store.clone(), id);
        rt.block_on(pool.register(64)).unwrap();
        let held = Arc::new(AtomicUsize::new(0));
        for _ in 0..32 {
            let (pool, held) = (pool.clone(), held.clone());
            rt.spawn(async move {
                let _guard = pool.borrow(TTL, Duration::from_secs(10)).await.unwrap();
                held.fetch_add(1, Ordering::SeqCst);
                std::future::pending::<()>().await;
            });
        }
        while held.load(Ordering::SeqCst) < 32 {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(in_use(&path, id), 32);
        rt.shutdown_timeout(Duration::ZERO);
        assert_eq!(
            settled(&path, id),
            0,
            "{synchronous:?}, round {round}: leases held by nobody after the shutdown"
        );
    }
}

#[test]
fn guards_held_at_a_shutdown_are_returned_with_group_commit() {
    held_at_shutdown(Synchronous::Full);
}

#[test]
fn guards_held_at_a_shutdown_are_returned_one_write_at_a_time() {
    held_at_shutdown(Synchronous::Normal);
}
