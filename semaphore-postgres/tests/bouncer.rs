//! The shared conformance suite through a real PgBouncer in transaction
//! mode (rule "Stores": primitives work through PgBouncer in
//! transaction mode; the listener connects to the server directly).

use std::sync::{Arc, OnceLock};

use semaphore_core::conformance::Fixture;
use semaphore_postgres::testing::{TestBouncer, TestServer};
use semaphore_postgres::{ManualClock, PostgresOptions, PostgresStore};

fn bouncer() -> &'static TestBouncer {
    static BOUNCER: OnceLock<TestBouncer> = OnceLock::new();
    BOUNCER.get_or_init(|| {
        TestBouncer::start(TestServer::shared().url()).unwrap_or_else(|e| panic!("{e}"))
    })
}

async fn make(clock: Arc<ManualClock>) -> Fixture {
    let server = TestServer::shared();
    let options = PostgresOptions::default()
        .schema(TestServer::fresh_schema())
        .pool_size(4)
        .listen_url(server.url())
        .manual_clock(clock.clone());
    let store = PostgresStore::connect_with(bouncer().url(), options)
        .await
        .expect("a PostgreSQL store through PgBouncer");
    Fixture::new(Arc::new(store), clock)
}

semaphore_core::store_conformance!(make);
