//! Bad input gets a 4xx with a clear message, and changes nothing.

mod common;

use common::{Server, pool_id};
use serde_json::{Value, json};

/// One bad request: method, path, content type, body, the status expected,
/// and words the error must say.
type Case = (
    &'static str,
    String,
    &'static str,
    Vec<u8>,
    u16,
    &'static str,
);

/// Sends a raw body with a content type; status and JSON body.
async fn raw(server: &Server, method: &str, path: &str, kind: &str, body: Vec<u8>) -> (u16, Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let response = server
        .http
        .request(method, server.url(path))
        .header("content-type", kind)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_clear_4xx_and_changes_nothing() {
    let server = Server::start(&["--memory"]);
    let id = pool_id();
    let pool = format!("/l/{id}");
    server.call("PUT", &pool, Some(json!({"count": 2}))).await;
    let json = "application/json";
    let cases: Vec<Case> = vec![
        (
            "PUT",
            pool.clone(),
            json,
            b"{\"count\": ".to_vec(),
            400,
            "malformed JSON",
        ),
        (
            "PUT",
            "/l/not-a-uuid".into(),
            json,
            b"{\"count\": 1}".to_vec(),
            400,
            "not a UUID",
        ),
        (
            "PUT",
            pool.clone(),
            json,
            b"{\"count\": -1}".to_vec(),
            400,
            "count must be",
        ),
        (
            "PUT",
            pool.clone(),
            json,
            b"{\"count\": 1001}".to_vec(),
            400,
            "from 0 to 1000",
        ),
        (
            "PUT",
            pool.clone(),
            json,
            b"{\"count\": 1e30}".to_vec(),
            400,
            "count must be",
        ),
        (
            "PUT",
            pool.clone(),
            json,
            b"{\"count\": 1.5}".to_vec(),
            400,
            "whole number",
        ),
        (
            "PUT",
            pool.clone(),
            json,
            b"{\"count\": 1, \"extra\": 1}".to_vec(),
            400,
            "unknown field",
        ),
        (
            "PUT",
            pool.clone(),
            "text/plain",
            b"{\"count\": 1}".to_vec(),
            415,
            "Content-Type",
        ),
        (
            "POST",
            format!("{pool}/borrow"),
            json,
            b"{\"ttl\": -5}".to_vec(),
            400,
            "ttl must be",
        ),
        (
            "POST",
            format!("{pool}/borrow"),
            json,
            b"{\"ttl\": 0}".to_vec(),
            400,
            "of at least 0.001",
        ),
        // Under a millisecond: the lease would be granted expired.
        (
            "POST",
            format!("{pool}/borrow"),
            json,
            b"{\"ttl\": 0.0004}".to_vec(),
            400,
            "of at least 0.001",
        ),
        (
            "POST",
            format!("{pool}/borrow"),
            json,
            b"{\"ttl\": 1e-300}".to_vec(),
            400,
            "of at least 0.001",
        ),
        (
            "POST",
            format!("{pool}/borrow"),
            json,
            b"{\"ttl\": 5, \"wait\": -1}".to_vec(),
            400,
            "wait must be",
        ),
        (
            "POST",
            format!("{pool}/borrow"),
            json,
            b"{\"ttl\": \"5\"}".to_vec(),
            400,
            "malformed JSON",
        ),
        (
            "POST",
            format!("{pool}/return"),
            json,
            b"{\"lease\": \"x\"}".to_vec(),
            400,
            "lease is not a UUID",
        ),
    ];
    for (method, path, kind, body, status, says) in cases {
        let (got, answer) = raw(&server, method, &path, kind, body).await;
        assert_eq!(got, status, "{method} {path}: {answer}");
        let error = answer["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{method} {path}: no error in {answer}"));
        assert!(
            error.contains(says),
            "{method} {path}: {error:?} does not say {says:?}"
        );
    }
    let (status, answer) = oversized(&server, &pool).await;
    assert_eq!(status, 413, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("at most"),
        "{answer}"
    );

    let (_, state) = server.call("GET", &pool, None).await;
    assert_eq!(
        common::seed_state(&state),
        json!({"id": id, "count": 2, "in_use": 0, "available": 2})
    );

    // Huge ttl and wait are clamped, as the seed says, not refused.
    let (status, granted) = server
        .call(
            "POST",
            &format!("{pool}/borrow"),
            Some(json!({"ttl": 1e30, "wait": 1e30})),
        )
        .await;
    assert_eq!(status, 200, "{granted}");
    assert_eq!(
        granted["expires_in"],
        24 * 3600,
        "clamped to the default max ttl"
    );
}

/// A `PUT` that declares a 10 MB body and sends its first 80 KiB, over a
/// raw socket: the server must refuse it from what it has read, and the
/// client reads the answer without racing the server's close (a client
/// still writing 10 MB may see the connection reset instead).
async fn oversized(server: &Server, path: &str) -> (u16, Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = server.base.trim_start_matches("http://");
    let mut socket = tokio::net::TcpStream::connect(address).await.unwrap();
    let head = format!(
        "PUT {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        10 << 20
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    let _ = socket.write_all(&vec![b' '; 80 << 10]).await;
    let mut answer = Vec::new();
    let _ = socket.read_to_end(&mut answer).await;
    let text = String::from_utf8_lossy(&answer);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

/// rule "HTTP": a body sent without a
/// Content-Type, as a browser's form or `text/plain` post from any page
/// would be (no preflight), is a 415 with the JSON error, and borrows
/// nothing; with `application/json` the same body borrows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_without_a_content_type_is_refused_and_borrows_nothing() {
    let server = Server::start(&["--memory"]);
    let id = pool_id();
    let pool = format!("/l/{id}");
    server.call("PUT", &pool, Some(json!({"count": 1}))).await;
    let response = server
        .http
        .post(server.url(&format!("{pool}/borrow")))
        .body(r#"{"ttl": 86400}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 415);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "unsupported_media_type", "{body}");
    let (_, state) = server.call("GET", &pool, None).await;
    assert_eq!(state["in_use"], 0, "{state}");
    let (status, _) = raw(
        &server,
        "POST",
        &format!("{pool}/borrow"),
        "application/json",
        br#"{"ttl": 5}"#.to_vec(),
    )
    .await;
    assert_eq!(status, 200);
}

/// A --max-ttl under 1 ms (the resolution of every expiry) would grant
/// every lease expired: serve refuses to start, naming the flag (R5).
#[test]
fn serve_refuses_a_max_ttl_under_a_millisecond() {
    for max_ttl in ["0s", "500us"] {
        let out = std::process::Command::new(common::BIN)
            .args([
                "serve",
                "--memory",
                "--listen",
                "127.0.0.1:0",
                "--max-ttl",
                max_ttl,
            ])
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{max_ttl}: {said}");
        assert!(
            said.contains("--max-ttl") && said.contains("1 ms"),
            "{said}"
        );
    }
}
