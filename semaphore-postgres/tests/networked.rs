//! The networked stores' cases on a real server (rule "Time"): machines
//! whose clocks disagree, and a crashed store's session.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use semaphore_postgres::store::from_unix_ms;
use semaphore_postgres::testing::TestServer;
use semaphore_postgres::tokio_postgres::{self, NoTls};
use semaphore_postgres::{Clock, PostgresOptions, PostgresStore, SessionId};

semaphore_core::networked_store_conformance! {
    fresh: TestServer::fresh_schema,
    connect: async |schema: String, clock: Option<Arc<dyn Clock>>, timeout: Option<Duration>| {
        let mut options = PostgresOptions::default().schema(schema);
        if let Some(clock) = clock {
            options = options.clock(clock);
        }
        if let Some(timeout) = timeout {
            options = options.session_timeout(timeout);
        }
        PostgresStore::connect_with(TestServer::shared().url(), options)
            .await
            .unwrap()
    },
    server_now: async |store: &PostgresStore| -> SystemTime {
        let client = store.connection_pool().get().await.unwrap();
        let row = client
            .query_one("SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint", &[])
            .await
            .unwrap();
        from_unix_ms(row.get::<_, i64>(0) as u64)
    },
    end_session: async |schema: String, id: SessionId| {
        let (client, connection) = tokio_postgres::connect(TestServer::shared().url(), NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        let sql = format!("DELETE FROM \"{schema}\".semaphore_sessions WHERE id = $1");
        assert_eq!(client.execute(&sql, &[id.as_uuid()]).await.unwrap(), 1);
    },
    pushes: true,
}
