//! Rule "Lost replies" on a dropped connection: a borrow whose call ran
//! on the server but whose reply was lost (the connection reset) is sent
//! again by the store as it was, and must answer the lease its first try
//! granted, not refuse while that lease holds the slot for nobody.
//!
//! A TCP proxy in front of the shared test server forwards the first
//! `borrow` call, swallows its reply and cuts the connection, as a reset
//! after the server ran the call would.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use semaphore_core::store::{BorrowRequest, Store, TryBorrow};
use semaphore_redis::testing::TestServer;
use semaphore_redis::{LeaseId, PoolId, RedisOptions, RedisStore};

/// One end of a byte stream to the server or the client: TCP, or the
/// shared test server's unix socket.
trait Duplex: Read + Write + Send {
    fn another(&self) -> Box<dyn Duplex>;
    fn close(&self);
}

impl Duplex for TcpStream {
    fn another(&self) -> Box<dyn Duplex> {
        Box::new(self.try_clone().unwrap())
    }
    fn close(&self) {
        let _ = self.shutdown(Shutdown::Both);
    }
}

impl Duplex for UnixStream {
    fn another(&self) -> Box<dyn Duplex> {
        Box::new(self.try_clone().unwrap())
    }
    fn close(&self) {
        let _ = self.shutdown(Shutdown::Both);
    }
}

/// A connection to the shared test server.
fn upstream() -> Option<Box<dyn Duplex>> {
    let url = TestServer::shared().url();
    match url.strip_prefix("redis+unix://") {
        Some(path) => UnixStream::connect(path)
            .ok()
            .map(|s| Box::new(s) as Box<dyn Duplex>),
        None => {
            let address = url.trim_start_matches("redis://").trim_end_matches('/');
            TcpStream::connect(address)
                .ok()
                .map(|s| Box::new(s) as Box<dyn Duplex>)
        }
    }
}

/// A proxy whose `armed` flag cuts the next connection that sends a
/// `borrow` script call, after forwarding it and swallowing its reply.
fn proxy() -> (u16, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let armed = Arc::new(AtomicBool::new(false));
    let armed_all = armed.clone();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { continue };
            let Some(server) = upstream() else {
                continue;
            };
            let swallow = Arc::new(AtomicBool::new(false));
            // Told when the server's reply to the cut call arrived.
            let (replied, reply_came) = std::sync::mpsc::channel::<()>();
            // Server -> client.
            {
                let (mut from, mut to) = (server.another(), client.another());
                let swallow = swallow.clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    while let Ok(n) = from.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        if swallow.load(Ordering::SeqCst) {
                            let _ = replied.send(());
                            continue;
                        }
                        if to.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    to.close();
                });
            }
            // Client -> server.
            let armed = armed_all.clone();
            std::thread::spawn(move || {
                let (mut from, mut to): (Box<dyn Duplex>, Box<dyn Duplex>) =
                    (Box::new(client), server);
                let mut buf = [0u8; 65536];
                while let Ok(n) = from.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let chunk = &buf[..n];
                    let is_borrow = chunk.windows(8).any(|w| w == b"\r\nborrow");
                    if is_borrow && armed.swap(false, Ordering::SeqCst) {
                        swallow.store(true, Ordering::SeqCst);
                        let _ = to.write_all(chunk);
                        // The call runs; its reply is swallowed, then the
                        // connection cut.
                        let _ = reply_came.recv_timeout(Duration::from_secs(10));
                        from.close();
                        to.close();
                        break;
                    }
                    if to.write_all(chunk).is_err() {
                        break;
                    }
                }
            });
        }
    });
    (port, armed)
}

async fn stores(port: u16) -> (RedisStore, RedisStore) {
    let prefix = TestServer::fresh_prefix();
    let options = || {
        RedisOptions::default()
            .prefix(prefix.clone())
            .restart_grace(Duration::ZERO)
    };
    let via_proxy = RedisStore::connect_with(&format!("redis://127.0.0.1:{port}"), options())
        .await
        .unwrap();
    let direct = RedisStore::connect_with(TestServer::shared().url(), options())
        .await
        .unwrap();
    (via_proxy, direct)
}

/// The repeated call answers the grant its first try made (the pool's only
/// slot), under the same lease id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_borrow_repeated_after_a_dropped_connection_answers_its_grant() {
    let (port, armed) = proxy();
    let (store, direct) = stores(port).await;
    let pool = PoolId::random();
    direct.register(pool, 1).await.unwrap();

    let id = LeaseId::new();
    armed.store(true, Ordering::SeqCst);
    let answer = store
        .try_borrow(&BorrowRequest::new(pool, id, Duration::from_secs(60)))
        .await;
    assert!(!armed.load(Ordering::SeqCst), "the proxy did not cut");
    let holders = direct.holders(pool).await.unwrap();
    assert!(
        matches!(&answer, Ok(TryBorrow::Granted { lease }) if lease.id == id),
        "the repeated borrow answered {answer:?} while its lease {id} holds the slot: {holders:?}"
    );
}
