//! Owner liveness on a real server (R16): the holder of a store's bound
//! leases is a connection of its own.

use std::sync::Arc;
use std::time::Duration;

use semaphore_mysql::store::Store;
use semaphore_mysql::testing::TestServer;
use semaphore_mysql::{MysqlOptions, MysqlStore};

/// A dropped store's connection ends; its bound lease frees, its unbound
/// lease stays, and no one takes a live connection's leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_stores_bound_lease_frees_and_its_unbound_one_stays() {
    let prefix = TestServer::fresh_prefix();
    semaphore_core::conformance::r16_a_gone_holders_bound_leases_free_and_unbound_ones_stay(
        || {
            let options = MysqlOptions::default().table_prefix(prefix.clone());
            async move {
                let store = MysqlStore::connect_with(TestServer::shared().url(), options)
                    .await
                    .unwrap();
                assert!(store.holder_id().is_some(), "the holder connection is up");
                Arc::new(store) as Arc<dyn Store>
            }
        },
        Duration::from_secs(20),
    )
    .await;
}
