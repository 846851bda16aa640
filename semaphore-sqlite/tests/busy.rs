//! The `metrics` feature: each pause the store makes on a file another
//! writer holds locked is counted (`semaphore_store_busy_retries_total`).

use std::sync::Arc;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use semaphore_sqlite::{Pool, PoolId, SqliteStore};

const TTL: Duration = Duration::from_secs(30);

/// The busy retries counted, in every thread, since the last snapshot (a
/// snapshot takes the counters' values).
fn retries(snapshotter: &Snapshotter) -> u64 {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, .., value)| match value {
            DebugValue::Counter(n) if key.key().name() == "semaphore_store_busy_retries_total" => {
                Some(n)
            }
            _ => None,
        })
        .sum()
}

/// A connection of the user's own holds the write lock (outside the
/// store's writers' queue): the store's borrow waits in its busy handler,
/// each pause counted, and is granted once the lock is let go. Nothing
/// sleeps on a timer here: the lock is let go once a pause was counted.
#[test]
fn a_borrow_held_up_by_another_writer_counts_its_pauses_and_is_granted() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this test binary");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("busy.db");
    let pool = Pool::new(
        Arc::new(SqliteStore::open(&path).unwrap()),
        PoolId::from_name("busy"),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(pool.register(1)).unwrap();
    assert_eq!(retries(&snapshotter), 0, "no writer held it up yet");

    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let borrower = std::thread::spawn(move || {
        runtime.block_on(async { pool.try_borrow(TTL).await.map(|lease| lease.position) })
    });
    let mut counted = 0;
    while counted == 0 && !borrower.is_finished() {
        counted += retries(&snapshotter);
        std::thread::yield_now();
    }
    other.execute_batch("COMMIT").unwrap();
    assert!(counted >= 1, "the pauses were not counted");
    let position = borrower
        .join()
        .unwrap()
        .expect("granted once the lock is let go");
    assert_eq!(position, 0);
}
