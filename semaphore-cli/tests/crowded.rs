//! One client address cannot lock out the others on a server with
//! default flags (rule "A default server serves everyone"): whatever it
//! holds its connections with (heads it never finishes, long polls,
//! answers it never reads), a second address is still served. The server
//! here takes `--max-connections 64`, so that a test can open more than it
//! serves; the per-address share is the default (a quarter of that), and
//! every other flag too. Before the share was on by default, each kind of
//! crowd locked the second address out (the sixth round's probe: 0 of 20
//! served with 1,500 half-sent heads).

mod common;

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

use common::{Server, pool_id};
use serde_json::json;

/// More connections than the server serves at once.
const CROWD: usize = 80;

/// Opens [`CROWD`] connections from 127.0.0.1, each sending `request` and
/// then reading nothing; they stay open (or are closed by the server)
/// until the returned sockets are dropped.
fn crowd(server: &Server, request: &[u8]) -> Vec<TcpStream> {
    let address: SocketAddr = server.base.trim_start_matches("http://").parse().unwrap();
    (0..CROWD)
        .filter_map(|_| {
            let mut socket = TcpStream::connect(address).ok()?;
            socket
                .set_write_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            // A write that finds no room (a closed connection, a full
            // buffer) is no matter: the socket stays as it is.
            let _ = socket.write_all(request);
            Some(socket)
        })
        .collect()
}

/// Whether a client on another address (127.0.0.2) is served within 10 s.
async fn another_address_is_served(server: &Server, pool: &str) -> Result<u16, String> {
    let other = reqwest::Client::builder()
        .local_address(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)))
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    other
        .get(server.url(pool))
        .send()
        .await
        .map(|answer| answer.status().as_u16())
        .map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_holding_many_connections_of_each_kind_leaves_another_served() {
    let server = Server::start(&["--memory", "--max-connections", "64"]);
    let pool = format!("/l/{}", pool_id());
    server.call("PUT", &pool, Some(json!({"count": 0}))).await;
    let waiting = r#"{"ttl": 60, "wait": 60}"#;
    let kinds: [(&str, Vec<u8>); 3] = [
        (
            "heads it never finishes",
            b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ".to_vec(),
        ),
        (
            "long polls",
            format!(
                "POST {pool}/borrow HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                 Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{waiting}",
                waiting.len()
            )
            .into_bytes(),
        ),
        (
            "answers it never reads",
            b"GET /openapi.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".repeat(200),
        ),
    ];
    for (kind, request) in kinds {
        let held = crowd(&server, &request);
        // Let the server take in what it will.
        tokio::time::sleep(Duration::from_millis(300)).await;
        match another_address_is_served(&server, &pool).await {
            Ok(status) => assert_eq!(status, 200, "{kind}"),
            Err(e) => {
                panic!("one address holding {CROWD} connections ({kind}) locked out another: {e}")
            }
        }
        drop(held);
    }
}

/// An answer the client does not read times out (`--write-timeout`): the
/// server closes the connection rather than keep it for as long as the
/// client likes (the probe saw 1,151 such connections open for 120 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_that_are_not_read_time_out() {
    use std::io::Read;
    let server = Server::start(&["--memory", "--write-timeout", "1s"]);
    let address: SocketAddr = server.base.trim_start_matches("http://").parse().unwrap();
    let mut socket = TcpStream::connect(address).unwrap();
    // Far more answer than the socket buffers hold, never read.
    let request = b"GET /openapi.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".repeat(2_000);
    socket
        .set_write_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let _ = socket.write_all(&request);
    std::thread::sleep(Duration::from_secs(3));
    // Everything the server wrote before it gave up is there to read, and
    // then the end: it closed the connection.
    socket
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut sink = vec![0u8; 1 << 20];
    let mut read = 0usize;
    loop {
        match socket.read(&mut sink) {
            Ok(0) => break,
            Ok(n) => read += n,
            // A reset once the server closed with our requests unread.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("the server kept the connection open ({read} bytes read): {e}"),
        }
    }
    let whole = request.len() / b"GET /openapi.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".len();
    let one_answer = server.text("/openapi.json").await.len();
    assert!(
        read < whole * one_answer,
        "every answer was written: nothing timed out ({read} bytes)"
    );
}

/// One address's slow bodies (a head, then part of the body, never the
/// rest) hold at most half of the places of bodies waited for: another
/// address whose body comes a moment after its head is served, not
/// answered 503 `too_many_slow_bodies` (with the defaults, one address's
/// share of connections was as large as every place).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_s_slow_bodies_leave_another_s_served() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = Server::start(&["--memory", "--max-connections", "64"]);
    let pool = format!("/l/{}", pool_id());
    let address: SocketAddr = server.base.trim_start_matches("http://").parse().unwrap();
    let slow = format!(
        "PUT {pool} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: 100\r\n\r\n{{"
    );
    // Every connection this address may hold, each with a body begun.
    let held = crowd(&server, slow.as_bytes());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)), 0))
        .unwrap();
    let mut stream = socket.connect(address).await.unwrap();
    let body = r#"{"count": 2}"#;
    let head = format!(
        "PUT {pool} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    stream.write_all(body.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(20), stream.read_to_string(&mut answer))
        .await
        .expect("an answer")
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    drop(held);
}
