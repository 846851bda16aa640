//! The shared conformance suite, run against [`SqliteStore`] on a file in a
//! temporary directory: with `synchronous=NORMAL` (each write its own
//! transaction), and in `group_commit` with `FULL` (writes in batches).

use std::sync::Arc;

use semaphore_core::conformance::Fixture;
use semaphore_sqlite::{ManualClock, SqliteOptions, SqliteStore, Synchronous};

async fn open(clock: Arc<ManualClock>, synchronous: Synchronous) -> Fixture {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let options = SqliteOptions::default()
        .manual_clock(clock.clone())
        .synchronous(synchronous);
    let store = SqliteStore::open_with(dir.path().join("conformance.db"), options)
        .expect("opening a fresh database");
    Fixture::new(Arc::new(store), clock)
        .grants_outside_a_runtime()
        .keep_alive(dir)
}

async fn make(clock: Arc<ManualClock>) -> Fixture {
    open(clock, Synchronous::Normal).await
}

semaphore_core::store_conformance!(make);
semaphore_core::store_queue_conformance!(make);

/// Commits that `fsync`, where the store's writes go in batches (rule
/// "Group commit").
mod group_commit {
    use super::*;

    async fn make(clock: Arc<ManualClock>) -> Fixture {
        open(clock, Synchronous::Full).await
    }

    semaphore_core::store_conformance!(make);
    semaphore_core::store_queue_conformance!(make);
}
