//! Listing pools (rule "Listing pools"): `GET /l?after=ID&limit=N` pages
//! through every pool in id order with who waits for each, refuses bad
//! queries naming the field, and is refused on a server open beyond
//! loopback without a bearer token (the ids are the only credential);
//! `semaphore pools` prints the same.

mod common;

use std::process::Command;

use common::{BIN, Server};
use serde_json::{Value, json};

/// Every page of `GET /l` with `limit`, and the pools on them.
async fn pages(server: &Server, limit: u32) -> (Vec<usize>, Vec<Value>) {
    let (mut sizes, mut pools, mut after) = (Vec::new(), Vec::new(), String::new());
    loop {
        let (status, page) = server
            .call("GET", &format!("/l?limit={limit}{after}"), None)
            .await;
        assert_eq!(status, 200, "{page}");
        let listed = page["pools"].as_array().unwrap().clone();
        sizes.push(listed.len());
        pools.extend(listed);
        match page["next"].as_str() {
            Some(next) => after = format!("&after={next}"),
            None => return (sizes, pools),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pool_is_listed_once_in_id_order_with_its_waiters() {
    let server = Server::start(&["--memory"]);
    let mut ids: Vec<String> = (0..5).map(|_| common::pool_id()).collect();
    for id in &ids {
        server
            .call("PUT", &format!("/l/{id}"), Some(json!({"count": 1})))
            .await;
    }
    let busy = ids[3].clone();
    let (status, _) = server
        .call(
            "POST",
            &format!("/l/{busy}/borrow"),
            Some(json!({"ttl": 60})),
        )
        .await;
    assert_eq!(status, 200);
    let waiter = {
        let (http, url) = (
            server.http.clone(),
            server.url(&format!("/l/{busy}/borrow")),
        );
        tokio::spawn(async move {
            http.post(url)
                .json(&json!({"ttl": 60, "wait": 30}))
                .send()
                .await
        })
    };
    server.until_waiting(&busy, 1).await;

    let (sizes, pools) = pages(&server, 2).await;
    assert_eq!(sizes, vec![2, 2, 1], "pages of 2, next null after the last");
    ids.sort();
    let listed: Vec<&str> = pools.iter().map(|p| p["id"].as_str().unwrap()).collect();
    assert_eq!(listed, ids, "every pool once, in id order");
    let shown = pools.iter().find(|p| p["id"] == busy.as_str()).unwrap();
    assert_eq!(
        (
            &shown["count"],
            &shown["in_use"],
            &shown["available"],
            &shown["waiting"]
        ),
        (&json!(1), &json!(1), &json!(0), &json!(1)),
        "{shown}"
    );
    assert_eq!(shown["draining"], json!(false));
    // Through a proxy, the caller may be anyone: no listing without a token.
    let proxied = server
        .http
        .get(server.url("/l"))
        .header("X-Forwarded-For", "203.0.113.9");
    assert_eq!(proxied.send().await.unwrap().status(), 403);
    let (_, default) = server.call("GET", "/l", None).await;
    assert_eq!(
        default["pools"].as_array().unwrap().len(),
        5,
        "100 by default"
    );
    waiter.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_query_is_a_400_naming_its_field() {
    let server = Server::start(&["--memory"]);
    for (query, field) in [
        ("limit=0", json!("limit")),
        ("limit=1001", json!("limit")),
        ("limit=ten", json!("limit")),
        ("after=not-a-uuid", json!("after")),
        ("sort=desc", Value::Null),
        ("limit=1&limit=2", Value::Null),
    ] {
        let (status, body) = server.call("GET", &format!("/l?{query}"), None).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["field"], field, "{query}: {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_open_beyond_loopback_lists_only_to_the_bearer_of_its_token() {
    let http = reqwest::Client::new();
    let open = Server::start_everywhere(&["--memory"]);
    let answer = http.get(open.url("/l")).send().await.unwrap();
    assert_eq!(answer.status(), 403);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["code"], "listing_refused", "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("--auth-token-file"),
        "{body}"
    );
    drop(open);

    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "0123456789abcdef0123").unwrap();
    let guarded =
        Server::start_everywhere(&["--memory", "--auth-token-file", token.to_str().unwrap()]);
    let listed = http
        .get(guarded.url("/l"))
        .bearer_auth("0123456789abcdef0123")
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status(), 200);
    let unauthorized = http.get(guarded.url("/l")).send().await.unwrap();
    assert_eq!(unauthorized.status(), 401);
}

#[test]
fn semaphore_pools_prints_every_pool_or_a_page() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("pools.db");
    let run = |args: &[&str]| {
        let out = Command::new(BIN)
            .args(args)
            .arg("--sqlite")
            .arg(&db)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let mut ids = Vec::new();
    for name in ["gpus", "licences", "builds"] {
        let shown = run(&["register", "--pool", name, "--count", "2", "--json"]);
        let state: Value = serde_json::from_str(&shown).unwrap();
        ids.push(state["id"].as_str().unwrap().to_string());
    }
    run(&["drain", "--pool", "gpus"]);
    ids.sort();
    let table = run(&["pools"]);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("id "), "a header: {table}");
    let listed: Vec<&str> = lines[1..]
        .iter()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(listed, ids, "{table}");
    let json = run(&["pools", "--json", "--limit", "2", "--after", &ids[0]]);
    let shown: Vec<Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(shown.len(), 2, "{json}");
    assert_eq!(
        (shown[0]["id"].as_str(), shown[1]["id"].as_str()),
        (Some(&*ids[1]), Some(&*ids[2]))
    );
    let every: Vec<Value> = run(&["pools", "--json"])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let gpus: Value = serde_json::from_str(&run(&["inspect", "--pool", "gpus", "--json"])).unwrap();
    for pool in &every {
        assert_eq!(
            pool["draining"],
            json!(pool["id"] == gpus["id"]),
            "only gpus drains: {pool}"
        );
    }
}
