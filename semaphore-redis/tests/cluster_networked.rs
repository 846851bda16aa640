//! The networked stores' cases on a real Redis Cluster (rule "Time"):
//! machines whose clocks disagree, and a crashed
//! store's session.

mod common;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use semaphore_redis::testing::{TestCluster, TestServer};
use semaphore_redis::{Clock, RedisStore, SessionId};

semaphore_core::networked_store_conformance! {
    fresh: TestServer::fresh_prefix,
    connect: async |prefix: String, clock: Option<Arc<dyn Clock>>, timeout: Option<Duration>| {
        let urls: Vec<&str> = TestCluster::shared().iter().map(String::as_str).collect();
        RedisStore::connect_cluster_with(&urls, common::networked_options(prefix, clock, timeout))
            .await
            .unwrap()
    },
    server_now: async |store: &RedisStore| -> SystemTime { common::server_now(store).await },
    // On a cluster a session keeps its end once per hash slot: every node's
    // keys of it go. Its holder learns at its next heartbeat (it listens
    // only to the slots it waited on).
    end_session: async |_prefix: String, id: SessionId| {
        common::delete_cluster_keys(&format!("*:s:{}", id.as_uuid()));
    },
    pushes: false,
}
