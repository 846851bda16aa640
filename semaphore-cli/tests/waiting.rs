//! Waiting borrows over real HTTP: 100 clients shown as
//! waiting (with the longest wait) and served in arrival order, a client that disconnects while waiting takes nothing, and
//! SIGTERM answers every waiter 503 and ends the process.

mod common;

use std::time::{Duration, Instant};

use common::{Server, pool_id};
use serde_json::{Value, json};

async fn sqlite_server() -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("w.db");
    (Server::start(&["--sqlite", db.to_str().unwrap()]), dir)
}

/// A full pool of one slot; the lease holding it.
async fn full(server: &Server, id: &str) -> String {
    server
        .call("PUT", &format!("/l/{id}"), Some(json!({"count": 1})))
        .await;
    let (_, body) = server
        .call("POST", &format!("/l/{id}/borrow"), Some(json!({"ttl": 60})))
        .await;
    body["lease"].as_str().unwrap().to_string()
}

fn spawn_borrow(server: &Server, id: &str, wait: u64) -> tokio::task::JoinHandle<(u16, Value)> {
    let (http, url) = (server.http.clone(), server.url(&format!("/l/{id}/borrow")));
    tokio::spawn(async move {
        let response = http
            .post(url)
            .json(&json!({"ttl": 60, "wait": wait}))
            .send()
            .await
            .expect("a response");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_waiting_clients_are_served_in_arrival_order() {
    let (server, _dir) = sqlite_server().await;
    let id = pool_id();
    let held = full(&server, &id).await;
    let mut clients = Vec::new();
    for i in 0..100 {
        clients.push(spawn_borrow(&server, &id, 30));
        server.until_waiting(&id, i + 1).await;
    }
    // The pool shows who waits: all 100, the first the longest, and its
    // wait only grows.
    let (_, first) = server.call("GET", &format!("/l/{id}"), None).await;
    assert_eq!(first["waiting"], 100, "{first}");
    let longest = first["longest_wait"].as_f64().unwrap();
    assert!(longest > 0.0, "{first}");
    let (_, later) = server.call("GET", &format!("/l/{id}"), None).await;
    assert!(
        later["longest_wait"].as_f64().unwrap() >= longest,
        "{later}"
    );
    // Each return hands the slot to the next client in line.
    let mut lease = held;
    let mut tokens = Vec::new();
    for client in clients {
        let (status, _) = server
            .call(
                "POST",
                &format!("/l/{id}/return"),
                Some(json!({"lease": lease})),
            )
            .await;
        assert_eq!(status, 200);
        let (status, body) = client.await.unwrap();
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["position"], 0);
        tokens.push(body["token"].as_u64().unwrap());
        lease = body["lease"].as_str().unwrap().to_string();
    }
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "not served in arrival order: {tokens:?}"
    );
    let (_, after) = server.call("GET", &format!("/l/{id}"), None).await;
    assert_eq!(
        (after["waiting"].as_u64(), after["longest_wait"].as_f64()),
        (Some(0), Some(0.0))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_while_waiting_takes_nothing() {
    let (server, _dir) = sqlite_server().await;
    let id = pool_id();
    let held = full(&server, &id).await;
    let gone = spawn_borrow(&server, &id, 30);
    server.until_waiting(&id, 1).await;
    gone.abort(); // closes the connection mid-request
    server.until_waiting(&id, 0).await;

    let (_, body) = server
        .call(
            "POST",
            &format!("/l/{id}/return"),
            Some(json!({"lease": held})),
        )
        .await;
    assert_eq!(body, json!({"returned": true}));
    let (status, body) = server
        .call(
            "POST",
            &format!("/l/{id}/borrow"),
            Some(json!({"ttl": 60, "wait": 0})),
        )
        .await;
    assert_eq!(status, 200, "the disconnected client kept the slot: {body}");
    let (_, state) = server.call("GET", &format!("/l/{id}"), None).await;
    assert_eq!(state["in_use"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_answers_every_waiter_503_and_exits() {
    let (mut server, _dir) = sqlite_server().await;
    let id = pool_id();
    full(&server, &id).await;
    let clients: Vec<_> = (0..100).map(|_| spawn_borrow(&server, &id, 30)).collect();
    server.until_waiting(&id, 100).await;

    let pid = server.child.id().to_string();
    let signalled = Instant::now();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    for client in clients {
        let (status, body) = client.await.unwrap();
        assert_eq!(status, 503, "{body}");
        assert!(
            body["error"].as_str().unwrap().contains("shutting down"),
            "{body}"
        );
    }
    let status = tokio::task::spawn_blocking(move || {
        let status = server.child.wait().unwrap();
        (status, server)
    });
    let (status, _server) = tokio::time::timeout(Duration::from_secs(10), status)
        .await
        .expect("the server did not exit")
        .unwrap();
    assert!(status.success(), "{status}");
    println!(
        "SIGTERM with 100 waiters: exited after {:?}",
        signalled.elapsed()
    );
}
