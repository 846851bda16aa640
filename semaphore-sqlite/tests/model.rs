//! The model-based property test of the shared suite, run against
//! [`SqliteStore`] on one file: random sequences compared step by step with
//! the rules' model (`PROPTEST_CASES`, default 10,000).

use std::sync::Arc;

use semaphore_core::conformance::Fixture;
use semaphore_sqlite::{ManualClock, SqliteOptions, SqliteStore};

async fn make(clock: Arc<ManualClock>) -> Fixture {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let options = SqliteOptions::default().manual_clock(clock.clone());
    let store = SqliteStore::open_with(dir.path().join("model.db"), options)
        .expect("opening a fresh database");
    Fixture::new(Arc::new(store), clock).keep_alive(dir)
}

semaphore_core::store_model!(make);
