//! A 0.5 s network blip between a `semaphore run` and its store ends
//! nothing (R16, amended: a connection that drops and comes back
//! within the session timeout keeps the session and every lease bound to
//! it): a second run that waits for the slot is let in only after the
//! first command has ended (issue 37; on dd70244 the second run got in
//! 0.06 s after the blip while the first command ran on for 7.5 s). Real
//! processes, a real server, a real proxy (the fault suite's).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::BIN;
use semaphore_faults::{Server, StoreKind};

/// The flags naming the store at `url` in `namespace`.
fn store_flags(kind: StoreKind, url: &str, namespace: &str) -> Vec<String> {
    let flags: [&str; 2] = match kind {
        StoreKind::Postgres => ["--postgres", "--postgres-schema"],
        StoreKind::Redis => ["--redis", "--redis-prefix"],
        StoreKind::Mysql => ["--mysql", "--mysql-prefix"],
        StoreKind::Sqlite => unreachable!("no network to blip"),
        StoreKind::RedisCluster => unreachable!("Server::proxied proxies one server"),
    };
    let mut args = vec![
        flags[0].into(),
        url.into(),
        flags[1].into(),
        namespace.into(),
    ];
    if matches!(kind, StoreKind::Redis) {
        // A fresh server: no restart to wait out.
        args.extend(["--redis-restart-grace".into(), "0s".into()]);
    }
    args
}

/// Nanoseconds since boot, as a file holds them.
fn read_ns(path: &Path) -> u128 {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .parse()
        .unwrap()
}

async fn blip_lets_no_second_run_in(kind: StoreKind) {
    let (server, namespace, proxy) =
        Server::proxied(kind, "blip", 1, Duration::from_secs(30)).await;
    let (through_proxy, _) = server.holder_url(proxy.port(), 0);
    let dir = tempfile::tempdir().unwrap();
    let (started, first_end, second_start) = (
        dir.path().join("started"),
        dir.path().join("first-end"),
        dir.path().join("second-start"),
    );
    // The machine's boot-time clock (centiseconds, as nanoseconds), which
    // no wall-clock step moves: fine enough against a 3 s hold.
    let now = "awk '{printf \"%d\", $1 * 1000000000}' /proc/uptime";
    let first_line = format!(
        "touch {}; sleep 3; {now} > {}",
        started.display(),
        first_end.display()
    );
    let mut first = Command::new(BIN)
        .arg("run")
        .args(store_flags(kind, &through_proxy, &namespace))
        .args(["--pool", "blip", "--", "sh", "-c", &first_line])
        .spawn()
        .unwrap();
    while !started.exists() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    proxy.blip(Duration::from_millis(500));
    let second_line = format!("{now} > {}", second_start.display());
    let second = tokio::task::spawn_blocking({
        let args = store_flags(kind, &server.url(), &namespace);
        move || {
            Command::new(BIN)
                .arg("run")
                .args(args)
                .args([
                    "--pool",
                    "blip",
                    "--wait",
                    "30s",
                    "--",
                    "sh",
                    "-c",
                    &second_line,
                ])
                .output()
                .unwrap()
        }
    });
    let first_status = tokio::task::spawn_blocking(move || first.wait().unwrap())
        .await
        .unwrap();
    let second = second.await.unwrap();
    assert!(
        first_status.success(),
        "the first run failed: {first_status}"
    );
    assert!(
        second.status.success(),
        "the second run failed: {}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert!(
        read_ns(&second_start) >= read_ns(&first_end),
        "the second run's command started while the first one's still ran"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blip_under_run_on_postgres_lets_no_second_run_in() {
    blip_lets_no_second_run_in(StoreKind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blip_under_run_on_redis_lets_no_second_run_in() {
    blip_lets_no_second_run_in(StoreKind::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blip_under_run_on_mysql_lets_no_second_run_in() {
    blip_lets_no_second_run_in(StoreKind::Mysql).await;
}
