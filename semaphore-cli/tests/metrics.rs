//! `GET /metrics`: the core's counters of grants, returns, 409s and
//! storage errors, its wait-time histogram, and per-pool gauges; a pool has
//! series of its own only under an operator's alias, never with its UUID
//! (the bearer secret) nor any other per-pool label.

mod common;

use common::{Server, pool_id};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_what_happened_and_never_show_a_pool_uuid() {
    let (named, secret, other) = (pool_id(), pool_id(), pool_id());
    let alias = format!("gpus={named}");
    let server = Server::start(&["--memory", "--alias", &alias]);
    for id in [&named, &secret, &other] {
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
    for id in [&secret, &other] {
        server
            .call("POST", &format!("/l/{id}/borrow"), Some(json!({"ttl": 60})))
            .await;
    }

    let text = server.text("/metrics").await;
    for line in [
        "semaphore_grants_total{pool=\"gpus\"} 1",
        "semaphore_exhausted_total{pool=\"gpus\"} 1",
        "semaphore_returns_total{pool=\"gpus\"} 0",
        "semaphore_borrow_wait_seconds_count{pool=\"gpus\"} 2",
        // The two unaliased pools share one series.
        "semaphore_grants_total 2",
        "semaphore_returns_total 0",
        "semaphore_borrow_wait_seconds_count 2",
        "semaphore_pool_in_use{pool=\"gpus\"} 1",
        "semaphore_pool_available{pool=\"gpus\"} 0",
        "semaphore_pool_count{pool=\"gpus\"} 1",
        "semaphore_pool_longest_wait_seconds{pool=\"gpus\"} 0",
    ] {
        assert!(text.lines().any(|l| l == line), "no {line:?} in:\n{text}");
    }
    assert!(
        [&named, &secret, &other]
            .iter()
            .all(|id| !text.contains(*id)),
        "a pool UUID leaked:\n{text}"
    );
    let labelled = |l: &&str| l.contains("pool=") && !l.contains("pool=\"gpus\"");
    let stray: Vec<&str> = text.lines().filter(labelled).collect();
    assert!(
        stray.is_empty(),
        "an unaliased pool has a series: {stray:?}"
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
    let text = server.text("/metrics").await;
    assert!(
        text.lines()
            .any(|l| l == "semaphore_returns_total{pool=\"gpus\"} 1"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l == "semaphore_pool_in_use{pool=\"gpus\"} 0"),
        "{text}"
    );
}

/// Every call the store fails is counted, whatever route made it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_errors_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&["--sqlite", dir.path().join("s.db").to_str().unwrap()]);
    let pool = format!("/l/{}", pool_id());
    let (status, _) = server.call("PUT", &pool, Some(json!({"count": 1}))).await;
    assert_eq!(status, 200);
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    let (status, _) = server.call("GET", &pool, None).await;
    assert_eq!(status, 502);
    let (status, _) = server
        .call("POST", &format!("{pool}/borrow"), Some(json!({"ttl": 30})))
        .await;
    assert_eq!(status, 502);
    let text = server.text("/metrics").await;
    assert!(
        text.lines()
            .any(|l| l == "semaphore_storage_errors_total 2"),
        "{text}"
    );
}

/// Two aliases of one name would merge two pools' series: refused at start.
#[test]
fn an_alias_names_one_pool() {
    let (a, b) = (pool_id(), pool_id());
    for aliases in [
        [format!("x={a}"), format!("x={b}")],
        [format!("x={a}"), format!("y={a}")],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_semaphore"))
            .args(["serve", "--memory", "--listen", "127.0.0.1:0", "--alias"])
            .arg(&aliases[0])
            .arg("--alias")
            .arg(&aliases[1])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(64), "{aliases:?}");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains("--alias"), "{said}");
    }
}
