//! Owner liveness with real processes: `semaphore run` binds
//! its slot to its own process, so a SIGKILLed wrapper's slot comes back
//! at once, not after its ttl; a lease taken over HTTP is the client's and
//! outlives the server that granted it.

mod common;

use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::Server;
use common::process::{run, until};
use serde_json::json;

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A SIGKILLed wrapper's slot (default ttl 30 s) is granted to the next
/// run while that ttl still has most of its time to go: the kernel dropped
/// the dead process's lock, and the next borrower saw it.
#[test]
fn a_sigkilled_wrappers_slot_comes_back_before_its_ttl() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("gpus.db");
    let expiry = dir.path().join("expiry");
    let line = format!(
        "echo $SEMAPHORE_EXPIRES_AT_MS > {}.tmp; mv {0}.tmp {0}; exec sleep 100",
        expiry.display()
    );
    let mut wrapper = run(
        &db,
        &["--pool", "gpus", "--count", "1", "--", "sh", "-c", &line],
    )
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    until(Duration::from_secs(30), "the command starting", || {
        expiry.exists()
    });
    let expires_at_ms: u64 = std::fs::read_to_string(&expiry)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    wrapper.kill().unwrap(); // SIGKILL
    wrapper.wait().unwrap();

    let output = run(&db, &["--pool", "gpus", "--wait", "60s", "--", "true"])
        .output()
        .unwrap();
    let granted_by_ms = unix_ms();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(
        granted_by_ms + 15_000 < expires_at_ms,
        "the slot came back only {} ms before the dead wrapper's ttl ran out",
        expires_at_ms.saturating_sub(granted_by_ms)
    );
}

/// A lease taken over HTTP is not bound to the server's process: after a
/// SIGKILL of the server, another server on the same file still counts it,
/// and its holder can return it there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_taken_over_http_outlives_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("http.db");
    let db_arg = db.to_str().unwrap();
    let id = common::pool_id();
    let pool = format!("/l/{id}");
    let first = Server::start(&["--sqlite", db_arg]);
    first.call("PUT", &pool, Some(json!({"count": 2}))).await;
    let (status, lease) = first
        .call("POST", &format!("{pool}/borrow"), Some(json!({"ttl": 600})))
        .await;
    assert_eq!(status, 200);
    drop(first); // SIGKILL, then reaped

    let second = Server::start(&["--sqlite", db_arg]);
    let (_, state) = second.call("GET", &pool, None).await;
    assert_eq!(state["in_use"], 1, "the client's lease outlived the server");
    let (_, returned) = second
        .call(
            "POST",
            &format!("{pool}/return"),
            Some(json!({"lease": lease["lease"]})),
        )
        .await;
    assert_eq!(returned, json!({"returned": true}));
}

/// `semaphore borrow` hands its lease to the shell that evals it: the
/// lease outlives the `semaphore` process.
#[test]
fn a_lease_from_semaphore_borrow_outlives_the_process() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("script.db");
    let borrow = |args: &[&str]| {
        std::process::Command::new(common::BIN)
            .args(["borrow", "--sqlite"])
            .arg(&db)
            .args(["--pool", "jobs"])
            .args(args)
            .output()
            .unwrap()
    };
    assert_eq!(
        borrow(&["--count", "1", "--ttl", "60s"]).status.code(),
        Some(0)
    );
    assert_eq!(
        borrow(&[]).status.code(),
        Some(75),
        "the first lease died with its process"
    );
}
