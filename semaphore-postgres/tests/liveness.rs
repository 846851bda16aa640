//! Owner liveness on a real server (R16): the holder of a store's bound
//! leases is its listening session.

use std::sync::Arc;
use std::time::Duration;

use semaphore_postgres::store::Store;
use semaphore_postgres::testing::TestServer;
use semaphore_postgres::{PostgresOptions, PostgresStore};

/// A dropped store's session ends; its bound lease frees, its unbound
/// lease stays, and no one takes a live session's leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_stores_bound_lease_frees_and_its_unbound_one_stays() {
    let schema = TestServer::fresh_schema();
    semaphore_core::conformance::r16_a_gone_holders_bound_leases_free_and_unbound_ones_stay(
        || {
            let options = PostgresOptions::default().schema(schema.clone());
            async move {
                let store = PostgresStore::connect_with(TestServer::shared().url(), options)
                    .await
                    .unwrap();
                // Bound leases need the listener's session: wait for it.
                while store.listener_backend().is_none() {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Arc::new(store) as Arc<dyn Store>
            }
        },
        Duration::from_secs(20),
    )
    .await;
}
