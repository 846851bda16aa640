//! Every request and response example of the seed document
//! (`shared/seeds/http-semaphore-service.txt`), replayed against a real
//! `semaphore serve` on 127.0.0.1, on the SQLite and PostgreSQL stores.

mod common;

use std::time::{SystemTime, UNIX_EPOCH};

use common::Server;
use semaphore_postgres::testing::TestServer;
use serde_json::json;

/// The seed's resource UUID.
const ID: &str = "9f1c2e7a-5b3d-4c8e-a1f0-6d2b9c4e7a01";

async fn replay(server: &Server) {
    let pool = format!("/l/{ID}");

    // Register a pool.
    let (status, body) = server.call("PUT", &pool, Some(json!({"count": 4}))).await;
    assert_eq!(status, 200);
    assert_eq!(
        common::seed_state(&body),
        json!({"id": ID, "count": 4, "in_use": 0, "available": 4})
    );

    // Borrowing: {"ttl": 30, "wait": 25} -> lease, position, expiry.
    let (status, first) = server
        .call(
            "POST",
            &format!("{pool}/borrow"),
            Some(json!({"ttl": 30, "wait": 25})),
        )
        .await;
    assert_eq!(status, 200);
    let lease = first["lease"].as_str().expect("a lease UUID");
    assert!(uuid::Uuid::parse_str(lease).is_ok(), "{first}");
    assert_eq!(first["position"], 0);
    assert_eq!(first["expires_in"], 30);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let at = first["expires_at_unix"]
        .as_u64()
        .expect("expires_at_unix in seconds");
    assert!(
        (now + 28..=now + 31).contains(&at),
        "expires_at_unix {at}, now {now}"
    );
    assert!(
        first["token"].as_u64().is_some(),
        "the fencing token extension"
    );

    // Inspect, with two leases out.
    let (_, second) = server
        .call("POST", &format!("{pool}/borrow"), Some(json!({"ttl": 30})))
        .await;
    assert_eq!(second["position"], 1, "the lowest free slot");
    let (status, body) = server.call("GET", &pool, None).await;
    assert_eq!(status, 200);
    assert_eq!(
        common::seed_state(&body),
        json!({"id": ID, "count": 4, "in_use": 2, "available": 2})
    );

    // Returning, idempotent.
    let ret = format!("{pool}/return");
    let (status, body) = server
        .call("POST", &ret, Some(json!({"lease": lease})))
        .await;
    assert_eq!((status, body), (200, json!({"returned": true})));
    let (_, body) = server
        .call("POST", &ret, Some(json!({"lease": lease})))
        .await;
    assert_eq!(body, json!({"returned": false}));
    let unknown = uuid::Uuid::new_v4().to_string();
    let (_, body) = server
        .call("POST", &ret, Some(json!({"lease": unknown})))
        .await;
    assert_eq!(body, json!({"returned": false}));

    // A returned slot is the next one handed out.
    let (_, again) = server
        .call("POST", &format!("{pool}/borrow"), Some(json!({"ttl": 30})))
        .await;
    assert_eq!(again["position"], 0);

    // 409 when the wait elapsed; wait 0 fails at once.
    server.call("PUT", &pool, Some(json!({"count": 2}))).await;
    let (status, body) = server
        .call(
            "POST",
            &format!("{pool}/borrow"),
            Some(json!({"ttl": 30, "wait": 0})),
        )
        .await;
    assert_eq!(status, 409);
    assert_eq!(body["error"], "no resource available");

    // Errors: 400 for an id that is not a UUID, 404 for no pool.
    let (status, body) = server.call("GET", "/l/not-a-uuid", None).await;
    assert_eq!(status, 400);
    assert!(
        body["error"].as_str().unwrap().contains("not a UUID"),
        "{body}"
    );
    let (status, body) = server
        .call("GET", &format!("/l/{}", uuid::Uuid::new_v4()), None)
        .await;
    assert_eq!(status, 404);
    assert!(body["error"].is_string());

    // Delete, idempotent; the pool's leases stop being valid.
    let (status, body) = server.call("DELETE", &pool, None).await;
    assert_eq!((status, body), (200, json!({"deleted": true})));
    let (_, body) = server.call("DELETE", &pool, None).await;
    assert_eq!(body, json!({"deleted": false}));
    let (status, _) = server.call("GET", &pool, None).await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_examples_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("golden.db");
    let server = Server::start(&["--sqlite", db.to_str().unwrap()]);
    replay(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_examples_on_postgres() {
    let schema = TestServer::fresh_schema();
    let pg = TestServer::shared();
    let server = Server::start(&["--postgres", pg.url(), "--postgres-schema", &schema]);
    replay(&server).await;
}
