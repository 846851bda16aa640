//! What a hostile client sends the HTTP service:
//! half-sent requests, arrays for objects, methods and paths the routes do
//! not take, a reused idempotency key, a store broken under the server.
//! Real server process, real sockets.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{Server, pool_id};
use serde_json::{Value, json};

/// The host:port of a server.
fn address(server: &Server) -> String {
    server.base.trim_start_matches("http://").to_string()
}

/// A socket to `address` whose reads give up after 20 s (a hang is a
/// failure, not a wait).
fn connect(address: &str) -> TcpStream {
    let socket = TcpStream::connect(address).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    socket
}

/// Sends `request` as raw bytes; the status and body of the answer, read
/// until the server closes (requests here ask it to).
fn raw(server: &Server, request: &[u8]) -> (u16, Value) {
    let mut socket = connect(&address(server));
    // The server may answer and close before it has read everything.
    let _ = socket.write_all(request);
    let mut answer = Vec::new();
    let _ = socket.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP answer: {text:?}"));
    let body = text.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    let body = serde_json::from_str(body).unwrap_or_else(|_| json!({ "raw": body }));
    (status, body)
}

fn is_seed_error(body: &Value) -> bool {
    body["error"].as_str().is_some_and(|e| !e.is_empty())
}

/// A client that sends half a request head is disconnected after the
/// header timeout instead of holding the connection open.
#[test]
fn a_half_sent_request_is_closed() {
    let server = Server::start(&["--memory", "--header-timeout", "1s"]);
    let mut socket = connect(&address(&server));
    socket
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
        .unwrap();
    let mut rest = Vec::new();
    match socket.read_to_end(&mut rest) {
        Ok(_) => {} // closed (hyper may first say 408)
        Err(e) => panic!("the half-sent request was still open after 20 s: {e}"),
    }
}

/// With one connection allowed, a second client is served only after the
/// first one's connection is closed (here by the header timeout).
/// A client that sends a whole head announcing 100 bytes of body and then
/// one byte is answered 408 `body_timeout` and disconnected after the body
/// timeout, on a route that reads a body and on one that takes none,
/// instead of holding the connection for as long as it likes.
#[test]
fn a_slow_body_is_answered_408_and_closed() {
    let server = Server::start(&["--memory", "--body-timeout", "1s", "--header-timeout", "1h"]);
    let id = pool_id();
    for head in [
        format!("PUT /l/{id} HTTP/1.1\r\n"),
        "GET /healthz HTTP/1.1\r\n".to_string(),
    ] {
        let request = format!(
            "{head}Host: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{"
        );
        let (status, body) = raw(&server, request.as_bytes());
        assert_eq!(
            (status, body["code"].as_str()),
            (408, Some("body_timeout")),
            "{head}: {body}"
        );
    }
}

/// With `--max-connections-per-address 2`, a third connection from the
/// same address is closed at once while two are open (they could stay for
/// the hour-long header timeout), and served once one of them closes.
#[test]
fn one_address_gets_its_share_of_connections() {
    let server = Server::start(&[
        "--memory",
        "--max-connections-per-address",
        "2",
        "--header-timeout",
        "1h",
    ]);
    let address = address(&server);
    let first = connect(&address);
    let _second = connect(&address);
    let mut third = connect(&address);
    let _ = third.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n");
    let mut answer = Vec::new();
    // Closed without an answer (a reset or an end of file), not left open.
    match third.read_to_end(&mut answer) {
        Ok(_) => assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer)),
        Err(e) => assert_ne!(e.kind(), std::io::ErrorKind::WouldBlock, "left open: {e}"),
    }
    drop(first);
    // The share frees as the server sees the close: poll until it serves.
    common::process::until(Duration::from_secs(30), "a connection served", || {
        let mut socket = connect(&address);
        let _ = socket
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        let mut answer = Vec::new();
        let _ = socket.read_to_end(&mut answer);
        answer.starts_with(b"HTTP/1.1 200")
    });
}

#[test]
fn connections_over_the_cap_wait_for_one_to_close() {
    let server = Server::start(&[
        "--memory",
        "--header-timeout",
        "1s",
        "--max-connections",
        "1",
    ]);
    let mut first = connect(&address(&server));
    // A whole request answered first: the server holds this connection
    // (its one permit) before the second one arrives.
    first
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut answered = Vec::new();
    let mut chunk = [0u8; 512];
    while !answered.ends_with(b"}") {
        let n = first.read(&mut chunk).unwrap();
        assert!(n > 0, "the first connection closed before its answer");
        answered.extend_from_slice(&chunk[..n]);
    }
    first.write_all(b"GET /healthz HTTP/1.1\r\n").unwrap();
    let second = std::thread::spawn({
        let address = address(&server);
        move || {
            let mut socket = connect(&address);
            socket
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                .unwrap();
            let mut answer = Vec::new();
            socket.read_to_end(&mut answer).unwrap();
            (std::time::Instant::now(), answer)
        }
    });
    first
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut rest = Vec::new();
    let _ = first.read_to_end(&mut rest);
    let first_closed = std::time::Instant::now();
    let (answered, answer) = second.join().unwrap();
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    assert!(
        answered >= first_closed,
        "the second connection was served beside the first"
    );
}

/// Bodies are JSON objects: an array is a 400 and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arrays_are_not_bodies() {
    let server = Server::start(&["--memory"]);
    let pool = format!("/l/{}", pool_id());
    server.call("PUT", &pool, Some(json!({"count": 1}))).await;
    let (status, body) = server.call("PUT", &pool, Some(json!([2]))).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("object"), "{body}");
    let (status, body) = server
        .call(
            "POST",
            &format!("{pool}/borrow"),
            Some(json!([30, 0, "me"])),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    let (_, state) = server.call("GET", &pool, None).await;
    assert_eq!(state["count"], 1);
    assert_eq!(state["in_use"], 0);
}

/// Every error answer has the seed's JSON body, those hyper writes before
/// any route runs included.
#[test]
fn every_error_answer_is_json() {
    let server = Server::start(&["--memory"]);
    let id = pool_id();
    for method in ["POST", "PATCH", "OPTIONS"] {
        let request = format!(
            "{method} /l/{id} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
        );
        let (status, body) = raw(&server, request.as_bytes());
        assert_eq!(status, 405, "{method}: {body}");
        assert!(is_seed_error(&body), "{method}: {body}");
    }
    let long = "a".repeat(100_000);
    let cases: Vec<(String, u16)> = vec![
        (
            format!("GET /l/{long} HTTP/1.1\r\nHost: localhost\r\n\r\n"),
            414,
        ),
        (
            format!(
                "GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Big: {}\r\n\r\n",
                "b".repeat(1 << 20)
            ),
            431,
        ),
        ("\x01\x02 junk\r\n\r\n".to_string(), 400),
    ];
    for (request, expected) in cases {
        let (status, body) = raw(&server, request.as_bytes());
        assert_eq!(status, expected, "{body}");
        assert!(is_seed_error(&body), "{expected}: {body}");
    }
}

/// A path that is not a UUID is echoed back short.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_bad_id_is_echoed_short() {
    let server = Server::start(&["--memory"]);
    let (status, body) = server
        .call("GET", &format!("/l/{}", "a".repeat(60_000)), None)
        .await;
    assert_eq!(status, 400);
    assert!(
        body.to_string().len() < 400,
        "{} bytes",
        body.to_string().len()
    );
}

/// The same Idempotency-Key with the same body is a retry (same lease);
/// with a different body it is refused with 422.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_reused_with_another_body_is_422() {
    let server = Server::start(&["--memory"]);
    let pool = format!("/l/{}", pool_id());
    server.call("PUT", &pool, Some(json!({"count": 2}))).await;
    let borrow = |body: Value| {
        let request = server
            .http
            .post(server.url(&format!("{pool}/borrow")))
            .header("Idempotency-Key", "charge-42")
            .json(&body);
        async move {
            let response = request.send().await.unwrap();
            (
                response.status().as_u16(),
                response.json::<Value>().await.unwrap(),
            )
        }
    };
    let (status, first) = borrow(json!({"ttl": 30})).await;
    assert_eq!(status, 200, "{first}");
    let (status, again) = borrow(json!({"ttl": 30})).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["lease"], first["lease"]);
    let (status, body) = borrow(json!({"ttl": 60, "owner": "else"})).await;
    assert_eq!(status, 422, "{body}");
    assert!(is_seed_error(&body));
    let (_, state) = server.call("GET", &pool, None).await;
    assert_eq!(state["in_use"], 1);
}

/// The SQLite file deleted under a running server: calls fail with 502
/// whose body does not show the file's path, and liveness turns 503 so that
/// an orchestrator restarts the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_broken_for_good_fails_liveness_and_hides_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("secret-place.db");
    let server = Server::start(&["--sqlite", db.to_str().unwrap()]);
    let pool = format!("/l/{}", pool_id());
    let (status, _) = server.call("PUT", &pool, Some(json!({"count": 1}))).await;
    assert_eq!(status, 200);
    let (status, _) = server.call("GET", "/healthz", None).await;
    assert_eq!(status, 200);
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    let (status, body) = server
        .call("POST", &format!("{pool}/borrow"), Some(json!({"ttl": 30})))
        .await;
    assert_eq!(status, 502, "{body}");
    assert!(!body.to_string().contains("secret-place"), "{body}");
    let (status, body) = server.call("GET", "/healthz", None).await;
    assert_eq!(status, 503, "{body}");
    assert!(is_seed_error(&body));
}
