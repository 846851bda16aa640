//! A server clock stepped back (NTP, a failover to a standby whose clock
//! lags) must not end a live session: the holder's own heartbeat then
//! reads an earlier `now`, and if it moved the session's end earlier, the
//! trigger that tells a holder its session was cut short by someone else
//! (schema 6) would fire for it, and every holder of the database would
//! drop its leases while the server still held them. A beat never moves
//! the end earlier. The step back is emulated with the beat's explicit
//! `now` parameter (what `clock_timestamp()` would read after the step);
//! the half second waited is for a notification that must not come.

use std::sync::Arc;
use std::time::Duration;

use semaphore_postgres::store::Store;
use semaphore_postgres::testing::TestServer;
use semaphore_postgres::tokio_postgres::{self, NoTls};
use semaphore_postgres::{Pool, PoolId, PostgresOptions, PostgresStore};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeat_after_the_servers_clock_stepped_back_does_not_end_the_session() {
    let schema = TestServer::fresh_schema();
    let options = PostgresOptions::default()
        .schema(&schema)
        .session_timeout(Duration::from_secs(10));
    let store = Arc::new(
        PostgresStore::connect_with(TestServer::shared().url(), options.clone())
            .await
            .unwrap(),
    );
    let pool = Pool::new(store.clone(), PoolId::from_name("cut"));
    pool.register(1).await.unwrap();
    let mut lease = pool
        .borrow(Duration::from_secs(60), Duration::ZERO)
        .await
        .unwrap();
    lease.keep_alive();
    let session = store.session().unwrap().current().unwrap();
    assert_eq!(lease.session, Some(session));

    let (client, connection) = tokio_postgres::connect(TestServer::shared().url(), NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let now: i64 = client
        .query_one(
            "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    // The heartbeat as the server runs it once its clock reads 4 s earlier.
    let beat = format!("SELECT \"{schema}\".semaphore_beat($1, 10000, false, $2)");
    let answer: Option<i64> = client
        .query_one(&beat, &[session.as_uuid(), &(now - 4_000)])
        .await
        .unwrap()
        .get(0);
    assert!(answer.is_some(), "the session lives on");
    tokio::time::sleep(Duration::from_millis(500)).await;

    // The server still holds the lease for this session: nobody else can
    // have the slot ...
    let other = Arc::new(
        PostgresStore::connect_with(TestServer::shared().url(), options)
            .await
            .unwrap(),
    );
    let other = Pool::new(other, PoolId::from_name("cut"));
    let taken = other.try_borrow(Duration::from_secs(5)).await;
    assert!(taken.is_err(), "the slot was free: {taken:?}");
    // ... but its holder was told the store ended its session.
    assert!(
        lease.is_held() && !lease.is_lost(),
        "a live session's holder was told it lost its lease: {}",
        if lease.is_lost() {
            lease.lost().await.to_string()
        } else {
            "is_held() is false".into()
        }
    );
}
