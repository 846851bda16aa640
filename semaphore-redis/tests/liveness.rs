//! Owner liveness on a real server (R16): the holder of a store's bound
//! leases is a connection of its own.

use std::sync::Arc;
use std::time::Duration;

use semaphore_redis::store::Store;
use semaphore_redis::testing::TestServer;
use semaphore_redis::{RedisOptions, RedisStore};

/// A dropped store's connection ends; its bound lease frees, its unbound
/// lease stays, and no one takes a live connection's leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_stores_bound_lease_frees_and_its_unbound_one_stays() {
    let prefix = TestServer::fresh_prefix();
    semaphore_core::conformance::r16_a_gone_holders_bound_leases_free_and_unbound_ones_stay(
        || {
            let options = RedisOptions::default()
                .prefix(prefix.clone())
                .restart_grace(Duration::ZERO);
            async move {
                let store = RedisStore::connect_with(TestServer::shared().url(), options)
                    .await
                    .unwrap();
                // Bound leases need the holder's connection: wait for it.
                while store.holder_id().is_none() {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Arc::new(store) as Arc<dyn Store>
            }
        },
        Duration::from_secs(20),
    )
    .await;
}
