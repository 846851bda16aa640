//! `GET /metrics`: counters of grants, returns and 409s, the wait-time
//! histogram, and per-pool gauges only under an operator's alias, never
//! with the pool's UUID (the bearer secret).

mod common;

use common::{Server, pool_id};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_what_happened_and_never_show_a_pool_uuid() {
    let (named, secret) = (pool_id(), pool_id());
    let alias = format!("gpus={named}");
    let server = Server::start(&["--memory", "--alias", &alias]);
    for id in [&named, &secret] {
        server
            .call("PUT", &format!("/l/{id}"), Some(json!({"count": 1})))
            .await;
    }
    let (_, lease) = server
        .call(
            "POST",
            &format!("/l/{named}/borrow"),
            Some(json!({"ttl": 60})),
        )
        .await;
    let (status, _) = server
        .call(
            "POST",
            &format!("/l/{named}/borrow"),
            Some(json!({"ttl": 60})),
        )
        .await;
    assert_eq!(status, 409);
    server
        .call(
            "POST",
            &format!("/l/{secret}/borrow"),
            Some(json!({"ttl": 60})),
        )
        .await;

    let text = server
        .http
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "semaphore_grants_total 2",
        "semaphore_exhausted_total 1",
        "semaphore_returns_total 0",
        "semaphore_borrow_wait_seconds_count 3",
        "semaphore_pool_in_use{pool=\"gpus\"} 1",
        "semaphore_pool_available{pool=\"gpus\"} 0",
        "semaphore_pool_count{pool=\"gpus\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "no {line:?} in:\n{text}");
    }
    assert!(
        !text.contains(&named) && !text.contains(&secret),
        "a pool UUID leaked:\n{text}"
    );
    assert!(
        !text.contains(lease["lease"].as_str().unwrap()),
        "a lease id leaked"
    );

    server
        .call(
            "POST",
            &format!("/l/{named}/return"),
            Some(json!({"lease": lease["lease"]})),
        )
        .await;
    let text = server
        .http
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.lines().any(|l| l == "semaphore_returns_total 1"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l == "semaphore_pool_in_use{pool=\"gpus\"} 0"),
        "{text}"
    );
}
