//! What the etcd store's tests share.

#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;

use semaphore_core::conformance::Fixture;
use semaphore_etcd::testing::TestCluster;
use semaphore_etcd::{EtcdOptions, EtcdStore, ManualClock};

/// A store on the shared test cluster under a fresh key prefix, in test
/// mode on `clock`.
pub async fn make(clock: Arc<ManualClock>) -> Fixture {
    let options = EtcdOptions::default()
        .prefix(TestCluster::fresh_prefix())
        .manual_clock(clock.clone());
    let store = EtcdStore::connect_with(TestCluster::shared().endpoints(), options)
        .await
        .expect("an etcd store on the test cluster");
    Fixture::new(Arc::new(store), clock)
}
