//! The networked stores' cases on a real server (rule "Time"): machines
//! whose clocks disagree, and a crashed store's session.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use semaphore_mysql::mysql_async::prelude::Queryable;
use semaphore_mysql::testing::TestServer;
use semaphore_mysql::{Clock, MysqlOptions, MysqlStore, SessionId};

semaphore_core::networked_store_conformance! {
    fresh: TestServer::fresh_prefix,
    connect: async |prefix: String, clock: Option<Arc<dyn Clock>>, timeout: Option<Duration>| {
        let mut options = MysqlOptions::default().table_prefix(prefix);
        if let Some(clock) = clock {
            options = options.clock(clock);
        }
        if let Some(timeout) = timeout {
            options = options.session_timeout(timeout);
        }
        MysqlStore::connect_with(TestServer::shared().url(), options)
            .await
            .unwrap()
    },
    server_now: async |store: &MysqlStore| -> SystemTime {
        let mut conn = store.connection_pool().get_conn().await.unwrap();
        let ms: Option<u64> = conn
            .query_first("SELECT CAST(UNIX_TIMESTAMP(SYSDATE(3)) * 1000 AS UNSIGNED)")
            .await
            .unwrap();
        SystemTime::UNIX_EPOCH + Duration::from_millis(ms.unwrap())
    },
    end_session: async |prefix: String, id: SessionId| {
        let pool = semaphore_mysql::mysql_async::Pool::new(TestServer::shared().url());
        let mut conn = pool.get_conn().await.unwrap();
        let sql = format!("DELETE FROM `{prefix}_sessions` WHERE id = ?");
        conn.exec_drop(sql, (id.as_uuid().as_bytes().to_vec(),)).await.unwrap();
        assert_eq!(conn.affected_rows(), 1, "no such session row");
        drop(conn);
        pool.disconnect().await.unwrap();
    },
    pushes: false,
}
