//! The store checkpoints its WAL off the borrow and return path (a thread
//! of its own), and the WAL still stays bounded under commits that never
//! pause: a checkpoint racing the commits copies their pages but cannot let
//! the WAL start again from its first page, so a WAL far behind is
//! checkpointed in a commit's own path, as SQLite's automatic checkpoint
//! does (without that, this load grew the WAL by about 7 KB a pair: 1.6 GB
//! in 8 s).

use std::sync::Arc;
use std::time::Duration;

use semaphore_sqlite::{Pool, PoolId, SqliteStore};

/// Pairs in all: about 140 MB of WAL if nothing ever started it again.
const PAIRS: usize = 20_000;
const TASKS: usize = 8;
/// The most the WAL may reach: a few times SQLite's own automatic bound
/// (1000 pages of 4 KB).
const BOUND: u64 = 48 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_stays_bounded_under_commits_that_never_pause() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("busy.db");
    let store = Arc::new(SqliteStore::open(&path).unwrap());
    let pool = Pool::new(store, PoolId::from_name("busy"));
    pool.register(4).await.unwrap();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move {
                for _ in 0..PAIRS / TASKS {
                    let guard = pool
                        .borrow(Duration::from_secs(60), Duration::from_secs(60))
                        .await
                        .unwrap();
                    assert!(guard.release().await.unwrap());
                }
            })
        })
        .collect();
    let wal = path.with_extension("db-wal");
    let mut largest = 0;
    for task in tasks {
        while !task.is_finished() {
            largest = largest.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        task.await.unwrap();
    }
    largest = largest.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
    assert!(
        largest < BOUND,
        "the WAL reached {} MB over {PAIRS} pairs",
        largest >> 20
    );
    assert_eq!(pool.inspect().await.unwrap().in_use, 0);
}
