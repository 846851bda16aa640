//! The model-based property test of the shared suite, run against
//! [`MemoryStore`]: random sequences compared step by step with the rules'
//! model (`PROPTEST_CASES`, default 10,000).

use std::sync::Arc;

use semaphore_core::conformance::Fixture;
use semaphore_memory::{ManualClock, MemoryStore};

async fn make(clock: Arc<ManualClock>) -> Fixture {
    Fixture::new(Arc::new(MemoryStore::with_clock(clock.clone())), clock)
}

semaphore_core::store_model!(make);
