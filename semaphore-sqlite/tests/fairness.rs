//! First come, first served across processes, step by step. Two stores on one file have separate
//! in-process queues, exactly as two processes do; the only link between
//! them is the file.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use semaphore_sqlite::rusqlite::Connection;
use semaphore_sqlite::{Error, Lease, Pool, PoolId, SqliteStore};
use tokio::task::JoinHandle;

const TTL: Duration = Duration::from_secs(60);

fn open(db: &Path) -> Pool {
    Pool::new(
        Arc::new(SqliteStore::open(db).unwrap()),
        PoolId::from_name("one"),
    )
}

fn queued_in_file(db: &Path) -> i64 {
    Connection::open(db)
        .unwrap()
        .query_row("SELECT COUNT(*) FROM semaphore_waiters", [], |r| r.get(0))
        .unwrap()
}

async fn until_queued_in_file(db: &Path, n: i64) {
    for _ in 0..100_000 {
        if queued_in_file(db) == n {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("the file never showed {n} queued heads");
}

/// "Process" A holds the only slot of a pool in `db`; "process" B waits
/// for it, its head queued in the file.
async fn b_queued_behind_a(db: &Path) -> (Pool, Lease, JoinHandle<Result<Lease, Error>>) {
    let a = open(db);
    let b = open(db);
    a.register(1).await.unwrap();
    let held = a.try_borrow(TTL).await.unwrap().forget();
    let waiter = tokio::spawn(async move {
        let lease = b
            .borrow(TTL, Duration::from_secs(30))
            .await
            .map(|l| l.forget());
        // B's store holds B's lease: dropping it here would free the
        // lease at once, and A could then take the slot fairly.
        std::mem::forget(b);
        lease
    });
    until_queued_in_file(db, 1).await;
    (a, held, waiter)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_freed_by_one_process_goes_to_the_waiter_of_another_not_back_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fair.db");
    let (a, held, waiter) = b_queued_behind_a(&db).await;

    // A returns and asks again at once: the free slot is B's.
    assert!(a.return_lease(held.id).await.unwrap());
    assert!(
        matches!(a.try_borrow(TTL).await, Err(Error::Exhausted { .. })),
        "A took the slot ahead of B's queued waiter"
    );
    let lease = waiter.await.unwrap().unwrap();
    assert_eq!(lease.position, 0);
    assert_eq!(
        queued_in_file(&db),
        0,
        "B's place was forgotten on its grant"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gives_up_leaves_the_file_queue_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fair.db");
    let (a, held, waiter) = b_queued_behind_a(&db).await;
    waiter.abort();
    until_queued_in_file(&db, 0).await;

    assert!(a.return_lease(held.id).await.unwrap());
    assert_eq!(a.try_borrow(TTL).await.unwrap().position, 0);
}

/// First come, first served with weights, across processes: B's head waits for all 3
/// slots. Two slots free are owed to it (its weight, not one slot per
/// head), so A's own borrow of 1 is refused; B gets all 3 once the last
/// frees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weighted_waiter_of_one_process_is_not_overtaken_by_a_single_of_another() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fair.db");
    let a = open(&db);
    let b = open(&db);
    a.register(3).await.unwrap();
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(a.try_borrow(TTL).await.unwrap().forget());
    }
    let waiter = tokio::spawn(async move {
        b.borrow_with(
            TTL,
            Duration::from_secs(30),
            semaphore_sqlite::BorrowOptions::new().slots(3),
        )
        .await
        .map(|l| l.forget())
    });
    until_queued_in_file(&db, 1).await;

    assert!(a.return_lease(held[0].id).await.unwrap());
    assert!(a.return_lease(held[1].id).await.unwrap());
    assert!(
        matches!(a.try_borrow(TTL).await, Err(Error::Exhausted { .. })),
        "A took a slot owed to B's waiter of 3"
    );
    assert!(a.return_lease(held[2].id).await.unwrap());
    let lease = waiter.await.unwrap().unwrap();
    assert_eq!(&lease.positions[..], &[0, 1, 2]);
    assert_eq!(queued_in_file(&db), 0);
}

/// Sessions on one file: a crashed handle's bound lease frees at once (its
/// holder file's lock died with it), its unbound and forgotten leases stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_handles_bound_lease_frees_and_its_unbound_one_stays() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("live.db");
    let first = std::sync::OnceLock::new();
    semaphore_core::conformance::r16_a_gone_holders_bound_leases_free_and_unbound_ones_stay(
        || async {
            let store = Arc::new(SqliteStore::open(&db).unwrap());
            first.get_or_init(|| store.clone());
            store as Arc<dyn semaphore_sqlite::store::Store>
        },
        |_| first.get().unwrap().abandon_holder(),
        Duration::from_secs(10),
    )
    .await;
}
