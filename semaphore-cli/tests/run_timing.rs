//! `semaphore run`'s timing: a short
//! session timeout keeps a healthy command, settings that leave no room
//! are refused, and a lost lease gets the command one SIGTERM and exit 70.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::BIN;
use common::process::{run, until};
use semaphore_sqlite::{Pool, PoolId, SqliteStore};

fn pool(db: &Path, name: &str) -> Pool {
    Pool::new(
        Arc::new(SqliteStore::open(db).unwrap()),
        PoolId::from_name(name),
    )
}

/// A healthy command under `--session-timeout 1s` (the documented
/// minimum) on `store` runs to its end: the margin and the SIGTERM period
/// are taken from the window the lease really has (the shorter of ttl and
/// session timeout), not from the 30 s ttl, which left none.
fn a_one_second_session_keeps_a_healthy_command(store: &[&str]) {
    let output = Command::new(BIN)
        .arg("run")
        .args(store)
        .args([
            "--session-timeout",
            "1s",
            "--pool",
            "short-session",
            "--count",
            "1",
            "--",
            "sleep",
            "4",
        ])
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "a healthy command was ended: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn a_one_second_session_timeout_keeps_a_healthy_command_on_redis() {
    let server = semaphore_redis::testing::TestServer::shared();
    let prefix = semaphore_redis::testing::TestServer::fresh_prefix();
    a_one_second_session_keeps_a_healthy_command(&[
        "--redis",
        server.url(),
        "--redis-prefix",
        &prefix,
        "--redis-restart-grace",
        "0s",
    ]);
}

#[test]
fn a_one_second_session_timeout_keeps_a_healthy_command_on_postgres() {
    let server = semaphore_postgres::testing::TestServer::shared();
    let schema = semaphore_postgres::testing::TestServer::fresh_schema();
    a_one_second_session_keeps_a_healthy_command(&[
        "--postgres",
        server.url(),
        "--postgres-schema",
        &schema,
    ]);
}

/// A `--kill-after` that the session timeout leaves no room for is a usage
/// error naming the flags to change, not quietly shrunk.
#[test]
fn a_kill_after_the_session_timeout_leaves_no_room_for_is_refused() {
    let server = semaphore_redis::testing::TestServer::shared();
    let prefix = semaphore_redis::testing::TestServer::fresh_prefix();
    let output = Command::new(BIN)
        .args(["run", "--redis", server.url(), "--redis-prefix", &prefix])
        .args(["--redis-restart-grace", "0s", "--session-timeout", "1s"])
        .args(["--kill-after", "500ms", "--pool", "p", "--count", "1"])
        .args(["--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(64), "{stderr}");
    for flag in ["--kill-after", "--session-timeout", "--ttl"] {
        assert!(stderr.contains(flag), "{flag} not named: {stderr}");
    }
}

/// A `--ttl` below 1 s cannot be kept alive and guarded: a usage error
/// naming `--ttl` and the minimum, before anything is borrowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_below_one_second_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    for ttl in ["1ms", "10ms", "200ms", "999ms"] {
        let output = run(
            &db,
            &["--pool", "p", "--count", "1", "--ttl", ttl, "--", "true"],
        )
        .output()
        .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(64), "--ttl {ttl}: {stderr}");
        assert!(
            stderr.contains("--ttl") && stderr.contains("1s"),
            "--ttl {ttl}: {stderr}"
        );
    }
    assert_eq!(pool(&db, "p").inspect().await.map_or(0, |s| s.in_use), 0);
}

/// An operator's force return reaches the wrapper at its next renewal: it
/// ends the command with one SIGTERM (the guardian, told, sends none of its
/// own, and says nothing about a renewal that never failed), then SIGKILL
/// after `--kill-after`, and exits 70. The command ignores SIGTERM and
/// counts it; a second SIGTERM from the guardian would come within its
/// last deadline less `--kill-after` (at most 9 s), before the wrapper's
/// SIGKILL (10 s after its own SIGTERM).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_returned_lease_gets_the_command_one_sigterm_and_exits_70() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("f.db");
    let (pidfile, log) = (dir.path().join("c.pid"), dir.path().join("terms"));
    let line = format!(
        "trap 'echo term >> {}' TERM; echo $$ > {}; while :; do sleep 0.05; done",
        log.display(),
        pidfile.display()
    );
    let wrapper = run(
        &db,
        &[
            "--pool",
            "p",
            "--count",
            "1",
            "--ttl",
            "20s",
            "--kill-after",
            "10s",
            "--",
            "sh",
            "-c",
            &line,
        ],
    )
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    until(Duration::from_secs(20), "the command starting", || {
        std::fs::read_to_string(&pidfile).is_ok_and(|p| p.ends_with('\n'))
    });
    assert!(pool(&db, "p").force_return(0).await.unwrap().is_some());
    let output = tokio::task::spawn_blocking(move || wrapper.wait_with_output().unwrap())
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(70), "{stderr}");
    let terms = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(terms.lines().count(), 1, "SIGTERMs: {terms:?}; {stderr}");
    assert!(
        !stderr.contains("could not renew") && !stderr.contains("did not confirm"),
        "the guardian spoke of a renewal that never failed: {stderr}"
    );
}
