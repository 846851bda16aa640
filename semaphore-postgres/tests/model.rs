//! The model-based property test, run against [`PostgresStore`] on a real
//! server: 2,000 sequences by default (about 30 s, each step a round trip;
//! 10,000 take two and a half minutes and passed when last run), more with
//! `PROPTEST_CASES`.

use std::sync::Arc;

use semaphore_core::conformance::Fixture;
use semaphore_postgres::testing::TestServer;
use semaphore_postgres::{ManualClock, PostgresOptions, PostgresStore};

async fn make(clock: Arc<ManualClock>) -> Fixture {
    let options = PostgresOptions::default()
        .schema(TestServer::fresh_schema())
        .manual_clock(clock.clone());
    let store = PostgresStore::connect_with(TestServer::shared().url(), options)
        .await
        .expect("a PostgreSQL store on the test server");
    Fixture::new(Arc::new(store), clock)
}

semaphore_core::store_model!(make, 2_000);
