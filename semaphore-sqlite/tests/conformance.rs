//! The shared conformance suite, run against [`SqliteStore`] on a file in a
//! temporary directory.

use std::sync::Arc;

use semaphore_core::conformance::Fixture;
use semaphore_sqlite::{ManualClock, SqliteOptions, SqliteStore};

async fn make(clock: Arc<ManualClock>) -> Fixture {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let options = SqliteOptions::default().manual_clock(clock.clone());
    let store = SqliteStore::open_with(dir.path().join("conformance.db"), options)
        .expect("opening a fresh database");
    Fixture::new(Arc::new(store), clock)
        .grants_outside_a_runtime()
        .keep_alive(dir)
}

semaphore_core::store_conformance!(make);
semaphore_core::store_queue_conformance!(make);
