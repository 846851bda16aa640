//! `Idempotency-Key` under races and retries: the key's
//! request digest is kept with the lease in the store's step that grants,
//! so that borrows racing with one key and two bodies get one lease
//! however many servers share the store, and a retried `/enqueue` gets the
//! same lease or the same ticket instead of leaking one.

mod common;

use common::{Server, pool_id};
use semaphore_postgres::testing::TestServer;
use serde_json::{Value, json};

/// POSTs `body` to `url` with `Idempotency-Key: key`.
async fn keyed_at(http: reqwest::Client, url: String, key: String, body: Value) -> (u16, Value) {
    let response = http
        .post(url)
        .header("Idempotency-Key", key)
        .json(&body)
        .send()
        .await
        .unwrap();
    (
        response.status().as_u16(),
        response.json::<Value>().await.unwrap(),
    )
}

/// POSTs `body` to `path` on `server` with `Idempotency-Key: key`.
async fn keyed(server: &Server, path: &str, key: &str, body: Value) -> (u16, Value) {
    keyed_at(server.http.clone(), server.url(path), key.to_string(), body).await
}

/// Ten rounds of eight borrows at once with one key, half with `{"ttl":
/// 30}` and half with `{"ttl": 31}`, alternating between two servers: one
/// lease is granted; every 200 is that lease, every other answer 422.
async fn racing_bodies_get_one_lease(servers: &[Server; 2]) {
    let pool = format!("/l/{}", pool_id());
    servers[0]
        .call("PUT", &pool, Some(json!({"count": 16})))
        .await;
    for round in 0..10 {
        let key = format!("charge-{round}");
        let path = format!("{pool}/borrow");
        let answers = futures_all((0..8).map(|i| {
            let server = &servers[i % 2];
            let body = json!({"ttl": 30 + (i / 2) % 2});
            keyed_at(server.http.clone(), server.url(&path), key.clone(), body)
        }))
        .await;
        let leases: Vec<&Value> = answers
            .iter()
            .filter(|(status, _)| *status == 200)
            .map(|(_, body)| &body["lease"])
            .collect();
        assert!(!leases.is_empty(), "{answers:?}");
        assert!(
            leases.iter().all(|l| *l == leases[0]),
            "two leases: {answers:?}"
        );
        assert!(
            answers.iter().all(|(status, body)| *status == 200
                || (*status == 422 && body["code"] == "idempotency_key_reused")),
            "{answers:?}"
        );
    }
    let (_, state) = servers[0].call("GET", &pool, None).await;
    assert_eq!(state["in_use"], 10);
}

/// Runs the futures at once, their outputs in order.
async fn futures_all<F: std::future::Future + Send + 'static>(
    futures: impl Iterator<Item = F>,
) -> Vec<F::Output>
where
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut outputs = Vec::new();
    for handle in handles {
        outputs.push(handle.await.unwrap());
    }
    outputs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_two_bodies_on_two_postgresql_servers_get_one_lease() {
    let (pg, schema) = (TestServer::shared(), TestServer::fresh_schema());
    let args = ["--postgres", pg.url(), "--postgres-schema", &schema];
    racing_bodies_get_one_lease(&[Server::start(&args), Server::start(&args)]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_two_bodies_on_two_servers_of_one_sqlite_file_get_one_lease() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("keys.db");
    let args = ["--sqlite", db.to_str().unwrap()];
    racing_bodies_get_one_lease(&[Server::start(&args), Server::start(&args)]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_two_bodies_on_one_memory_server_get_one_lease() {
    let server = Server::start(&["--memory"]);
    let pool = format!("/l/{}", pool_id());
    server.call("PUT", &pool, Some(json!({"count": 8}))).await;
    let path = format!("{pool}/borrow");
    let answers = futures_all((0..8).map(|i| {
        let body = json!({"ttl": 30 + i % 2});
        keyed_at(server.http.clone(), server.url(&path), "k".into(), body)
    }))
    .await;
    let granted: Vec<_> = answers.iter().filter(|(s, _)| *s == 200).collect();
    assert!(
        granted
            .iter()
            .all(|(_, b)| b["lease"] == granted[0].1["lease"]),
        "{answers:?}"
    );
    assert!(
        answers.iter().all(|(s, _)| *s == 200 || *s == 422),
        "{answers:?}"
    );
}

/// A retried `/enqueue` (its answer lost) gets what the first got: the
/// same lease when a slot was free, the same ticket when it queued, and
/// that ticket's lease once a poll collected it; the key with another body
/// is then 422; nothing is held twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_enqueue_gets_the_same_lease_or_ticket() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("enqueue.db");
    for args in [vec!["--memory"], vec!["--sqlite", db.to_str().unwrap()]] {
        let server = Server::start(&args);
        let pool = format!("/l/{}", pool_id());
        let path = format!("{pool}/enqueue");
        server.call("PUT", &pool, Some(json!({"count": 1}))).await;
        let (status, first) = keyed(&server, &path, "job-1", json!({"ttl": 60})).await;
        assert_eq!(status, 200, "{args:?}: {first}");
        let (status, again) = keyed(&server, &path, "job-1", json!({"ttl": 60})).await;
        assert_eq!(
            (status, &again["lease"]),
            (200, &first["lease"]),
            "{args:?}"
        );
        let (status, queued) = keyed(&server, &path, "job-2", json!({"ttl": 60})).await;
        assert_eq!(status, 202, "{args:?}: {queued}");
        let (status, retried) = keyed(&server, &path, "job-2", json!({"ttl": 60})).await;
        assert_eq!(
            (status, &retried["ticket"]),
            (202, &queued["ticket"]),
            "{args:?}"
        );
        // Served: the ticket's poll collects the lease; the key now names it.
        let lease = first["lease"].clone();
        server
            .call(
                "POST",
                &format!("{pool}/return"),
                Some(json!({"lease": lease})),
            )
            .await;
        let poll = json!({"ticket": queued["ticket"], "wait": 30});
        let (status, served) = server
            .call("POST", &format!("{pool}/wait"), Some(poll))
            .await;
        assert_eq!(status, 200, "{args:?}: {served}");
        let (status, again) = keyed(&server, &path, "job-2", json!({"ttl": 60})).await;
        assert_eq!(
            (status, &again["lease"]),
            (200, &served["lease"]),
            "{args:?}"
        );
        let (status, other) = keyed(&server, &path, "job-2", json!({"ttl": 61})).await;
        assert_eq!(
            (status, other["code"].as_str()),
            (422, Some("idempotency_key_reused")),
            "{args:?}: {other}"
        );
        let (_, state) = server.call("GET", &pool, None).await;
        assert_eq!(state["in_use"], 1, "{args:?}");
    }
}
