//! Drain (SIGUSR1, ended by SIGUSR2): the server grants nothing new, a
//! waiting borrow answers 503 at once, a holder still returns and renews,
//! and `/readyz` says so, for a load balancer to send new work elsewhere.

mod common;

use common::{Server, pool_id};
use serde_json::json;

fn signal(server: &Server, name: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{name}"), &server.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Polls `/readyz` until it answers `status` (signals arrive when they do).
async fn until_ready_is(server: &Server, status: u16) {
    while server.call("GET", "/readyz", None).await.0 != status {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_server_grants_nothing_new_and_lets_holders_finish() {
    let server = Server::start(&["--memory"]);
    let id = pool_id();
    let pool = format!("/l/{id}");
    server.call("PUT", &pool, Some(json!({"count": 1}))).await;
    let (_, held) = server
        .call("POST", &format!("{pool}/borrow"), Some(json!({"ttl": 60})))
        .await;
    let waiter = {
        let (http, url) = (server.http.clone(), server.url(&format!("{pool}/borrow")));
        tokio::spawn(async move {
            let answer = http
                .post(url)
                .json(&json!({"ttl": 60, "wait": 30}))
                .send()
                .await
                .unwrap();
            (
                answer.status().as_u16(),
                answer.json::<serde_json::Value>().await.unwrap(),
            )
        })
    };
    server.until_waiting(&id, 1).await;

    signal(&server, "USR1");
    until_ready_is(&server, 503).await;
    let (status, body) = waiter.await.unwrap();
    assert_eq!(
        (status, body["code"].as_str()),
        (503, Some("draining")),
        "{body}"
    );
    let (status, body) = server
        .call("POST", &format!("{pool}/borrow"), Some(json!({"ttl": 60})))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (503, Some("draining")),
        "{body}"
    );
    assert_eq!(body["retryable"], true);
    // The holder finishes: renews, then returns.
    let lease = json!({"lease": held["lease"], "ttl": 60});
    let (status, _) = server
        .call("POST", &format!("{pool}/renew"), Some(lease))
        .await;
    assert_eq!(status, 200);
    let (status, body) = server
        .call(
            "POST",
            &format!("{pool}/return"),
            Some(json!({"lease": held["lease"]})),
        )
        .await;
    assert_eq!((status, &body["returned"]), (200, &json!(true)));

    signal(&server, "USR2");
    until_ready_is(&server, 200).await;
    let (status, body) = server
        .call("POST", &format!("{pool}/borrow"), Some(json!({"ttl": 60})))
        .await;
    assert_eq!(status, 200, "{body}");
}
