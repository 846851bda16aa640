//! What the MySQL store's tests share.

#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;

use semaphore_core::conformance::Fixture;
use semaphore_mysql::testing::TestServer;
use semaphore_mysql::{ManualClock, MysqlOptions, MysqlStore};

/// A store on the shared test server under a fresh table prefix, in test
/// mode on `clock`.
pub async fn make(clock: Arc<ManualClock>) -> Fixture {
    let options = MysqlOptions::default()
        .table_prefix(TestServer::fresh_prefix())
        .pool_size(8)
        .manual_clock(clock.clone());
    let store = MysqlStore::connect_with(TestServer::shared().url(), options)
        .await
        .expect("a MySQL store on the test server");
    Fixture::new(Arc::new(store), clock)
}
