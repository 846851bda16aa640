//! The networked stores' cases on a real Redis Cluster (rule "Time", R7,
//! R10; R16 amended, R17): machines whose clocks disagree, and a crashed
//! store's session.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use semaphore_redis::testing::{TestCluster, TestServer};
use semaphore_redis::{Clock, RedisOptions, RedisStore};

semaphore_core::networked_store_conformance! {
    fresh: TestServer::fresh_prefix,
    connect: async |prefix: String, clock: Option<Arc<dyn Clock>>, timeout: Option<Duration>| {
        let mut options = RedisOptions::default()
            .prefix(prefix)
            .restart_grace(Duration::ZERO);
        if let Some(clock) = clock {
            options = options.clock(clock);
        }
        if let Some(timeout) = timeout {
            options = options.session_timeout(timeout);
        }
        let urls: Vec<&str> = TestCluster::shared().iter().map(String::as_str).collect();
        RedisStore::connect_cluster_with(&urls, options)
            .await
            .unwrap()
    },
    server_now: async |store: &RedisStore| -> SystemTime {
        let mut connection = store.connection().clone();
        let (s, us): (u64, u64) = semaphore_redis::redis::cmd("TIME")
            .query_async(&mut connection)
            .await
            .unwrap();
        SystemTime::UNIX_EPOCH + Duration::from_secs(s) + Duration::from_micros(us)
    },
}
