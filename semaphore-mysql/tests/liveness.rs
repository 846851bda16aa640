//! Owner liveness on a real server (R16, amended; R17): bound leases
//! belong to the store's session.

use std::sync::Arc;
use std::time::Duration;

use semaphore_mysql::store::Store;
use semaphore_mysql::testing::TestServer;
use semaphore_mysql::{MysqlOptions, MysqlStore};

/// A crashed store's session ends at its timeout; its bound lease frees,
/// its holder is told first, its unbound and forgotten leases stay, and no
/// one takes a live session's leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_stores_bound_lease_frees_and_its_unbound_one_stays() {
    let prefix = TestServer::fresh_prefix();
    semaphore_core::conformance::r16_a_gone_holders_bound_leases_free_and_unbound_ones_stay(
        || {
            let options = MysqlOptions::default()
                .table_prefix(prefix.clone())
                .session_timeout(Duration::from_secs(1));
            async move {
                let store = MysqlStore::connect_with(TestServer::shared().url(), options)
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
