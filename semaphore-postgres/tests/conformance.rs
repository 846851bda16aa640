//! The shared conformance suite, run against [`PostgresStore`] on a real
//! server, each case in a schema of its own.

use std::sync::Arc;

use semaphore_core::conformance::Fixture;
use semaphore_postgres::testing::TestServer;
use semaphore_postgres::{ManualClock, PostgresOptions, PostgresStore};

async fn make(clock: Arc<ManualClock>) -> Fixture {
    let server = TestServer::shared();
    let options = PostgresOptions::default()
        .schema(TestServer::fresh_schema())
        .pool_size(8)
        .manual_clock(clock.clone());
    let store = PostgresStore::connect_with(server.url(), options)
        .await
        .expect("a PostgreSQL store on the test server");
    Fixture::new(Arc::new(store), clock)
}

semaphore_core::store_conformance!(make);
semaphore_core::store_queue_conformance!(make);

/// The same suite with the statements prepared once per connection and run
/// by name ([`PostgresOptions::prepared_statements`]).
mod prepared {
    use super::*;

    async fn make(clock: Arc<ManualClock>) -> Fixture {
        let options = PostgresOptions::default()
            .schema(TestServer::fresh_schema())
            .pool_size(8)
            .prepared_statements(true)
            .manual_clock(clock.clone());
        let store = PostgresStore::connect_with(TestServer::shared().url(), options)
            .await
            .expect("a PostgreSQL store on the test server");
        Fixture::new(Arc::new(store), clock)
    }

    semaphore_core::store_conformance!(make);
    semaphore_core::store_queue_conformance!(make);
}
