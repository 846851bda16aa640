//! A renewal stuck on a connection gone silent (a dropped NAT or firewall
//! entry, a half-open connection: the bytes go nowhere and nothing errors)
//! is given up and tried again on another connection before the lease is
//! lost, while the store answers new connections at once (found by a
//! hostile test, where the holder lost its lease with the store reachable
//! all along). Every connection open at one moment is frozen by a proxy
//! that forwards every later one; the lease is held as `semaphore run`
//! holds it (ttl and session 8 s, renewed and heartbeated every second).
//! The 12 s waited is the stall itself.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use semaphore_postgres::store::Store;
use semaphore_postgres::testing::TestServer;
use semaphore_postgres::{Pool, PoolId, PostgresOptions, PostgresStore};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

/// Connections numbered below this are frozen: no byte moves either way.
static FROZEN_BELOW: AtomicU64 = AtomicU64::new(0);
/// The number the next connection gets.
static NEXT: AtomicU64 = AtomicU64::new(0);

async fn pipe(mut from: impl AsyncRead + Unpin, mut to: impl AsyncWrite + Unpin, n: u64) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if FROZEN_BELOW.load(Ordering::SeqCst) > n {
            // A dead flow: both ends held open, nothing moves.
            std::future::pending::<()>().await;
        }
        let read = tokio::time::timeout(Duration::from_millis(20), from.read(&mut buf)).await;
        let Ok(read) = read else { continue };
        let Ok(k) = read else { return };
        if k == 0 {
            return;
        }
        while FROZEN_BELOW.load(Ordering::SeqCst) > n {
            std::future::pending::<()>().await;
        }
        if to.write_all(&buf[..k]).await.is_err() {
            return;
        }
    }
}

/// The server's unix socket, from the test server's `host=DIR` (and
/// `port=`, 5432 by default).
fn socket(url: &str) -> std::path::PathBuf {
    let field = |name: &str| {
        url.split_whitespace()
            .find_map(|kv| kv.strip_prefix(name))
            .map(str::to_string)
    };
    let dir = field("host=").expect("a key=value URL with host=");
    assert!(dir.starts_with('/'), "a unix socket's directory: {url}");
    let port = field("port=").unwrap_or_else(|| "5432".into());
    std::path::Path::new(&dir).join(format!(".s.PGSQL.{port}"))
}

async fn proxy(upstream: std::path::PathBuf) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (client, _) = listener.accept().await.unwrap();
            let n = NEXT.fetch_add(1, Ordering::SeqCst);
            let upstream = upstream.clone();
            tokio::spawn(async move {
                let Ok(server) = tokio::net::UnixStream::connect(&upstream).await else {
                    return;
                };
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                tokio::join!(pipe(cr, sw, n), pipe(sr, cw, n));
            });
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_on_a_dead_flow_is_tried_again_elsewhere_before_the_lease_is_lost() {
    let server = TestServer::start().unwrap();
    let port = proxy(socket(server.url())).await;
    let url = format!("host=127.0.0.1 port={port} user=postgres dbname=postgres");
    let options = PostgresOptions::default()
        .schema(TestServer::fresh_schema())
        .session_timeout(Duration::from_secs(8));
    let store = Arc::new(PostgresStore::connect_with(&url, options).await.unwrap());
    let pool = Pool::new(store.clone(), PoolId::from_name("stall"));
    pool.register(1).await.unwrap();
    let mut lease = pool
        .borrow(Duration::from_secs(8), Duration::ZERO)
        .await
        .unwrap();
    lease.keep_alive_every(Duration::from_secs(1));
    store.session().unwrap().beat_every(Duration::from_secs(1));
    tokio::time::sleep(Duration::from_millis(1_500)).await;

    // Every flow open now goes dead; new connections work.
    FROZEN_BELOW.store(NEXT.load(Ordering::SeqCst), Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(12)).await;

    let state = store.session().unwrap().state();
    assert!(
        !lease.is_lost(),
        "the lease was lost ({}) with the store reachable on new connections all along \
         (session {state:?})",
        lease.lost().await
    );
}
