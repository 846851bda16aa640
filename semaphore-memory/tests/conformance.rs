//! The shared conformance suite, run against [`MemoryStore`].

use std::sync::Arc;

use semaphore_core::conformance::Fixture;
use semaphore_memory::{ManualClock, MemoryStore};

async fn make(clock: Arc<ManualClock>) -> Fixture {
    Fixture::new(Arc::new(MemoryStore::with_clock(clock.clone())), clock).grants_outside_a_runtime()
}

semaphore_core::store_conformance!(make);
