//! A `semaphore run` wrapper killed outright (SIGKILL) on a networked
//! store: its guardian kills the command's group and then returns the
//! lease itself, so the slot comes back long before the
//! wrapper's session would end (30 s for `run`). Real processes, real
//! servers.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::BIN;
use common::process::{ended, read_pid, until};

/// Runs the scenario with `store` (the flags naming the store): a first
/// run holding the one slot is killed with SIGKILL; a second run that
/// waits at most 10 s (a third of the session timeout) gets the slot, and
/// the first command is gone by then.
fn killed_wrapper_gives_the_slot_back(store: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("first.pid");
    let line = format!("echo $$ > {}; exec sleep 100", pidfile.display());
    let mut first = Command::new(BIN)
        .arg("run")
        .args(store)
        .args(["--pool", "killed", "--count", "1", "--", "sh", "-c", &line])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let command = read_pid(&pidfile);
    first.kill().unwrap(); // SIGKILL
    first.wait().unwrap();
    let check = format!("test ! -d /proc/{command} || grep -q ') Z' /proc/{command}/stat");
    let second = Command::new(BIN)
        .arg("run")
        .args(store)
        .args([
            "--pool", "killed", "--wait", "10s", "--", "sh", "-c", &check,
        ])
        .output()
        .unwrap();
    assert_eq!(
        second.status.code(),
        Some(0),
        "the slot did not come back (or the command still ran): {}",
        String::from_utf8_lossy(&second.stderr)
    );
    until(Duration::from_secs(20), "the first command ending", || {
        ended(command)
    });
}

#[test]
fn postgres() {
    let server = semaphore_postgres::testing::TestServer::shared();
    let schema = semaphore_postgres::testing::TestServer::fresh_schema();
    killed_wrapper_gives_the_slot_back(&["--postgres", server.url(), "--postgres-schema", &schema]);
}

#[test]
fn redis() {
    let server = semaphore_redis::testing::TestServer::shared();
    let prefix = semaphore_redis::testing::TestServer::fresh_prefix();
    killed_wrapper_gives_the_slot_back(&[
        "--redis",
        server.url(),
        "--redis-prefix",
        &prefix,
        "--redis-restart-grace",
        "0s",
    ]);
}

#[test]
fn mysql() {
    let server = semaphore_mysql::testing::TestServer::shared();
    let prefix = semaphore_mysql::testing::TestServer::fresh_prefix();
    killed_wrapper_gives_the_slot_back(&["--mysql", server.url(), "--mysql-prefix", &prefix]);
}

#[test]
fn sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("k.db");
    killed_wrapper_gives_the_slot_back(&["--sqlite", db.to_str().unwrap()]);
}

/// A waiter killed outright holds back no one. A first run
/// holds the one slot; a second waits, its process's place in the store's
/// queue; it is killed (SIGKILL); the first ends; a third run that waits
/// at most 2 s gets the slot, though the dead waiter's place would have
/// lived 4.5 s after its last look had the store not seen its connection
/// gone. `heads` counts the places queued on the pool, as the store sees
/// them.
async fn killed_waiter_holds_back_no_one<F, Fut>(store: &[&str], heads: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = u32>,
{
    let dir = tempfile::tempdir().unwrap();
    let (holding, release) = (dir.path().join("holding"), dir.path().join("release"));
    let line = format!(
        "echo $$ > {}; while [ ! -e {} ]; do sleep 0.02; done",
        holding.display(),
        release.display()
    );
    let run = |args: &[&str]| {
        let mut command = Command::new(BIN);
        command
            .arg("run")
            .args(store)
            .args(["--pool", "waiters"])
            .args(args);
        command
    };
    let mut first = run(&["--count", "1", "--", "sh", "-c", &line])
        .spawn()
        .unwrap();
    read_pid(&holding);
    let mut second = run(&["--wait", "60s", "--", "true"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let patience = std::time::Instant::now() + Duration::from_secs(20);
    while heads().await == 0 {
        if std::time::Instant::now() >= patience || second.try_wait().unwrap().is_some() {
            let _ = first.kill();
            let _ = second.kill();
            let out = second.wait_with_output().unwrap();
            panic!(
                "the second run never queued: {:?} {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    second.kill().unwrap(); // SIGKILL, while it waits
    second.wait().unwrap();
    std::fs::write(&release, b"").unwrap();
    assert_eq!(first.wait().unwrap().code(), Some(0));
    let third = run(&["--wait", "2s", "--", "true"]).output().unwrap();
    assert_eq!(
        third.status.code(),
        Some(0),
        "the dead waiter held the slot back: {}",
        String::from_utf8_lossy(&third.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_waiter_holds_back_no_one_on_redis() {
    let server = semaphore_redis::testing::TestServer::shared();
    killed_waiter_on_redis("--redis", &[server.url()]).await;
}

/// The same on a Redis Cluster (`--redis-cluster`): a waiter's place
/// names its connection to the master of the pool's slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_waiter_holds_back_no_one_on_a_redis_cluster() {
    let nodes = semaphore_redis::testing::TestCluster::shared();
    let urls: Vec<&str> = nodes.iter().map(String::as_str).collect();
    killed_waiter_on_redis("--redis-cluster", &urls).await;
}

/// [`killed_waiter_holds_back_no_one`] on Redis: one server (`--redis`,
/// one URL) or a cluster (`--redis-cluster`, its nodes' URLs).
async fn killed_waiter_on_redis(flag: &str, urls: &[&str]) {
    use semaphore_redis::{PoolId, RedisOptions, RedisStore};
    let prefix = semaphore_redis::testing::TestServer::fresh_prefix();
    let options = RedisOptions::default()
        .prefix(&prefix)
        .restart_grace(Duration::ZERO);
    let looker = match flag {
        "--redis" => RedisStore::connect_with(urls[0], options).await,
        _ => RedisStore::connect_cluster_with(urls, options).await,
    }
    .unwrap();
    let pool = PoolId::from_name("waiters");
    let urls = urls.join(",");
    let args = [
        flag,
        &urls,
        "--redis-prefix",
        &prefix,
        "--redis-restart-grace",
        "0s",
    ];
    killed_waiter_holds_back_no_one(&args, || async {
        looker.queue_heads(pool).await.unwrap_or(0)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_waiter_holds_back_no_one_on_mysql() {
    use semaphore_mysql::{MysqlOptions, MysqlStore, PoolId};
    let server = semaphore_mysql::testing::TestServer::shared();
    let prefix = semaphore_mysql::testing::TestServer::fresh_prefix();
    let options = MysqlOptions::default().table_prefix(&prefix);
    let looker = MysqlStore::connect_with(server.url(), options)
        .await
        .unwrap();
    let pool = PoolId::from_name("waiters");
    killed_waiter_holds_back_no_one(
        &["--mysql", server.url(), "--mysql-prefix", &prefix],
        || async { looker.queue_heads(pool).await.unwrap_or(0) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_waiter_holds_back_no_one_on_postgres() {
    use semaphore_postgres::{PoolId, PostgresOptions, PostgresStore};
    let server = semaphore_postgres::testing::TestServer::shared();
    let schema = semaphore_postgres::testing::TestServer::fresh_schema();
    let options = PostgresOptions::default().schema(&schema);
    let looker = PostgresStore::connect_with(server.url(), options)
        .await
        .unwrap();
    let pool = PoolId::from_name("waiters");
    killed_waiter_holds_back_no_one(
        &["--postgres", server.url(), "--postgres-schema", &schema],
        || async { looker.queue_heads(pool).await.unwrap_or(0) },
    )
    .await;
}
