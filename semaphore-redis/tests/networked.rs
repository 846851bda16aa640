//! The networked stores' cases on a real server (rule "Time"): machines
//! whose clocks disagree, and a crashed store's session.

mod common;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use semaphore_redis::testing::TestServer;
use semaphore_redis::{Clock, RedisStore, SessionId};

semaphore_core::networked_store_conformance! {
    fresh: TestServer::fresh_prefix,
    connect: async |prefix: String, clock: Option<Arc<dyn Clock>>, timeout: Option<Duration>| {
        RedisStore::connect_with(TestServer::shared().url(), common::networked_options(prefix, clock, timeout))
            .await
            .unwrap()
    },
    server_now: async |store: &RedisStore| -> SystemTime { common::server_now(store).await },
    end_session: async |prefix: String, id: SessionId| {
        let deleted = TestServer::shared().command(&format!("DEL {prefix}:s:{}", id.as_uuid()));
        assert_eq!(deleted.trim(), ":1", "no such session key");
    },
    pushes: true,
}
