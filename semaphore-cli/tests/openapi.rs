//! The OpenAPI document the server serves at `/openapi.json` is the one
//! committed in `semaphore-cli/openapi.json` (a snapshot, as crates.io pins
//! its own): a change to the API shows up in review as a change to that
//! file. Regenerate it with `SEMAPHORE_BLESS=1 cargo test -p semaphore-cli
//! --test openapi`.

mod common;

use common::Server;

const SNAPSHOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.json");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_openapi_document_matches_the_committed_snapshot() {
    let server = Server::start(&["--memory"]);
    let served = server.text("/openapi.json").await;
    let document: serde_json::Value = serde_json::from_str(&served).expect("JSON");
    for path in [
        "/l/{id}",
        "/l/{id}/borrow",
        "/l/{id}/return",
        "/l/{id}/renew",
        "/l/{id}/leases",
    ] {
        assert!(document["paths"][path].is_object(), "{path} is missing");
    }
    // Each operation declares the parameters its path names: a generator
    // drops an operation that does not (openapi-python-client did, when a
    // second `params(...)` replaced the first).
    for (path, item) in document["paths"].as_object().unwrap() {
        let named: Vec<&str> = path
            .split('/')
            .filter_map(|part| part.strip_prefix('{')?.strip_suffix('}'))
            .collect();
        for (method, operation) in item.as_object().unwrap() {
            let declared: Vec<&str> = operation["parameters"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .filter(|p| p["in"] == "path")
                .filter_map(|p| p["name"].as_str())
                .collect();
            assert_eq!(declared, named, "{method} {path}: path parameters");
        }
    }
    if std::env::var_os("SEMAPHORE_BLESS").is_some() {
        std::fs::write(SNAPSHOT, &served).unwrap();
    }
    let committed = std::fs::read_to_string(SNAPSHOT).unwrap_or_default();
    assert!(
        committed == served,
        "the OpenAPI document changed; review it and run \
         `SEMAPHORE_BLESS=1 cargo test -p semaphore-cli --test openapi` to update {SNAPSHOT}"
    );
}
