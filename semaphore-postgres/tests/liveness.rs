//! Owner liveness on a real server (R16, amended; R17): bound leases
//! belong to the store's session.

use std::sync::Arc;
use std::time::Duration;

use semaphore_postgres::store::Store;
use semaphore_postgres::testing::TestServer;
use semaphore_postgres::{PostgresOptions, PostgresStore};

/// A crashed store's session ends at its timeout; its bound lease frees,
/// its holder is told first, its unbound and forgotten leases stay, and no
/// one takes a live session's leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_stores_bound_lease_frees_and_its_unbound_one_stays() {
    let schema = TestServer::fresh_schema();
    semaphore_core::conformance::r16_a_gone_holders_bound_leases_free_and_unbound_ones_stay(
        || {
            let options = PostgresOptions::default()
                .schema(schema.clone())
                .session_timeout(Duration::from_secs(1));
            async move {
                let store = PostgresStore::connect_with(TestServer::shared().url(), options)
                    .await
                    .unwrap();
                Arc::new(store) as Arc<dyn Store>
            }
        },
        |store| store.session().unwrap().abandon(),
        Duration::from_secs(20),
    )
    .await;
}
