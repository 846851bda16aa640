//! What the Redis store's tests share.

#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use semaphore_core::conformance::Fixture;
use semaphore_redis::testing::{TestCluster, TestServer};
use semaphore_redis::{Clock, ManualClock, RedisOptions, RedisStore};

/// A store on the shared test server under a fresh prefix, in test mode
/// on `clock`, with no restart grace (the test server is young).
pub async fn make(clock: Arc<ManualClock>) -> Fixture {
    let options = RedisOptions::default()
        .prefix(TestServer::fresh_prefix())
        .restart_grace(std::time::Duration::ZERO)
        .manual_clock(clock.clone());
    let store = RedisStore::connect_with(TestServer::shared().url(), options)
        .await
        .expect("a Redis store on the test server");
    Fixture::new(Arc::new(store), clock)
}

/// A store on the shared test cluster under a fresh prefix, in test mode
/// on `clock`, with no restart grace: its pools spread over the masters.
pub async fn make_cluster(clock: Arc<ManualClock>) -> Fixture {
    make_cluster_under(TestServer::fresh_prefix(), clock).await
}

/// The same under a fresh prefix with a hash tag: every pool on one slot.
pub async fn make_cluster_one_slot(clock: Arc<ManualClock>) -> Fixture {
    let prefix = TestServer::fresh_prefix();
    make_cluster_under(format!("{prefix}{{{prefix}}}"), clock).await
}

async fn make_cluster_under(prefix: String, clock: Arc<ManualClock>) -> Fixture {
    let options = RedisOptions::default()
        .prefix(prefix)
        .restart_grace(std::time::Duration::ZERO)
        .manual_clock(clock.clone());
    let urls: Vec<&str> = TestCluster::shared().iter().map(String::as_str).collect();
    let store = RedisStore::connect_cluster_with(&urls, options)
        .await
        .expect("a Redis store on the test cluster");
    Fixture::new(Arc::new(store), clock)
}

/// The networked cases' options: under `prefix`, on `clock` if given,
/// with session timeout `timeout` if given, no restart grace.
pub fn networked_options(
    prefix: String,
    clock: Option<Arc<dyn Clock>>,
    timeout: Option<Duration>,
) -> RedisOptions {
    let mut options = RedisOptions::default()
        .prefix(prefix)
        .restart_grace(Duration::ZERO);
    if let Some(clock) = clock {
        options = options.clock(clock);
    }
    if let Some(timeout) = timeout {
        options = options.session_timeout(timeout);
    }
    options
}

/// The server's clock (`TIME`; on a cluster, a node's), read through
/// `store`'s connection.
pub async fn server_now(store: &RedisStore) -> SystemTime {
    let mut connection = store.connection().clone();
    let (s, us): (u64, u64) = semaphore_redis::redis::cmd("TIME")
        .query_async(&mut connection)
        .await
        .unwrap();
    SystemTime::UNIX_EPOCH + Duration::from_secs(s) + Duration::from_micros(us)
}

/// Deletes every key matching `pattern` on every master of the shared
/// test cluster, as an operator would (replicas refuse writes, and follow).
pub fn delete_cluster_keys(pattern: &str) {
    let mut deleted = 0;
    for url in TestCluster::shared() {
        let mut node = semaphore_redis::redis::Client::open(url.as_str())
            .unwrap()
            .get_connection()
            .unwrap();
        let keys: Vec<String> = semaphore_redis::redis::cmd("KEYS")
            .arg(pattern)
            .query(&mut node)
            .unwrap();
        for key in keys {
            let gone: semaphore_redis::redis::RedisResult<i64> = semaphore_redis::redis::cmd("DEL")
                .arg(&key)
                .query(&mut node);
            deleted += gone.unwrap_or(0);
        }
    }
    assert!(deleted > 0, "no key matched {pattern}");
}
