//! Bad input gets a 4xx with a clear message, and changes nothing (R14).

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
            pool.clone(),
            json,
            vec![b' '; 10 << 20],
            413,
            "at most",
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
            "greater than 0",
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
    let (_, state) = server.call("GET", &pool, None).await;
    assert_eq!(
        state,
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
