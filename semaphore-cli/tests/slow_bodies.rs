//! Slow bodies on every connection: one
//! client address that keeps re-opening requests whose body never comes
//! whole does not lock a default server's other clients out. Real server
//! process, real sockets.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::{Server, pool_id};

/// The head of a request that announces 100 bytes of body, and 1 of them.
const SLOW: &[u8] = b"PUT /l/6f1c0b1e-8f0e-4c4e-9a55-1f0d2a7f3b11 HTTP/1.1\r\nHost: localhost\r\n\
    Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{";

/// Keeps one slow body open until `stop`: re-opens it as soon as the
/// server answers and closes it; counts the bodies begun in `sent`, and
/// the answers that refused one with 503 `too_many_slow_bodies` in
/// `refused`.
fn attacker(
    address: String,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicUsize>,
    refused: Arc<AtomicUsize>,
) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut socket) = TcpStream::connect(&address) else {
            continue;
        };
        socket
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        if socket.write_all(SLOW).is_err() {
            continue;
        }
        sent.fetch_add(1, Ordering::Relaxed);
        let mut answer = Vec::new();
        let mut chunk = [0u8; 1024];
        loop {
            match socket.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => answer.extend_from_slice(&chunk[..n]),
                // Waited for: hold it open.
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                }
                Err(_) => break,
            }
        }
        let text = String::from_utf8_lossy(&answer);
        if text.starts_with("HTTP/1.1 503") && text.contains("too_many_slow_bodies") {
            refused.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A fresh request on a new connection: its status line (a hang of 20 s
/// is a failure, not a timing claim).
fn fresh(address: &str, request: &str) -> String {
    let mut socket = TcpStream::connect(address).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    socket.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    if let Err(e) = socket.read_to_end(&mut answer) {
        panic!("a fresh request was not answered within 20 s: {e}");
    }
    let text = String::from_utf8_lossy(&answer);
    text.lines().next().unwrap_or_default().to_string()
}

/// With every connection of a server kept busy by one address's slow
/// bodies, re-opened as soon as they close, each of 40 fresh requests (a
/// body-less GET, and a PUT whose body comes with its head) is served: by
/// default only a quarter of `--max-connections` (here 8, so 2) wait for
/// their bodies at once; the others are answered 503
/// `too_many_slow_bodies` and closed at once. Every client here has one
/// address, as behind a proxy, whose operator raised the per-address
/// share to every connection (tests/crowded.rs has one address against
/// another with the default share).
#[test]
fn slow_bodies_on_every_connection_leave_fresh_requests_served() {
    let server = Server::start(&[
        "--memory",
        "--max-connections",
        "8",
        "--max-connections-per-address",
        "8",
        "--header-timeout",
        "1h",
        "--body-timeout",
        "1h",
    ]);
    let address = server.base.trim_start_matches("http://").to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let (sent, refused): (Arc<AtomicUsize>, Arc<AtomicUsize>) = Default::default();
    let attackers: Vec<_> = (0..8)
        .map(|_| {
            let (address, stop) = (address.clone(), stop.clone());
            let (sent, refused) = (sent.clone(), refused.clone());
            std::thread::spawn(move || attacker(address, stop, sent, refused))
        })
        .collect();
    // Every attacker has begun a slow body: the server's 8 connections
    // are theirs, but for those it refuses.
    common::process::until(Duration::from_secs(30), "slow bodies sent", || {
        sent.load(Ordering::Relaxed) >= 8
    });
    let pool = format!("/l/{}", pool_id());
    let body = r#"{"count": 1}"#;
    for n in 0..20 {
        let get = "GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
        assert_eq!(fresh(&address, get), "HTTP/1.1 200 OK", "GET {n}");
        let put = format!(
            "PUT {pool} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        assert_eq!(fresh(&address, &put), "HTTP/1.1 200 OK", "PUT {n}");
    }
    stop.store(true, Ordering::Relaxed);
    for attacker in attackers {
        attacker.join().unwrap();
    }
    assert!(
        refused.load(Ordering::Relaxed) > 0,
        "no slow body was refused"
    );
}
