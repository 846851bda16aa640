//! Outages between a `semaphore run` and its store (a
//! connection that drops and comes back within the session timeout keeps
//! the session and every lease bound to it). A 0.5 s network blip ends
//! nothing: a second run that waits for the slot is let in only after the
//! first command has ended. An outage as long as the bound the README
//! states ends nothing either: the command runs to its own end and exit
//! code. Real processes, a real server, a real proxy (the fault suite's).

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
        StoreKind::Etcd => ["--etcd", "--etcd-prefix"],
        StoreKind::Sqlite => unreachable!("no network to blip"),
        StoreKind::RedisCluster | StoreKind::EtcdCluster => {
            unreachable!("Server::proxied proxies one server")
        }
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blip_under_run_on_etcd_lets_no_second_run_in() {
    blip_lets_no_second_run_in(StoreKind::Etcd).await;
}

/// The README's bound on an outage that ends nothing, for `--ttl` and
/// `--session-timeout` 8 s and `--kill-after` 1 s: the window (8 s) less
/// the kill-after (1 s), the margin (a tenth of the window, 0.8 s), two
/// tellings of the guardian (1 s each) and 0.5 s for the first
/// confirmation after the store is back.
const BOUND: Duration = Duration::from_millis(8_000 - 1_000 - 800 - 2_000 - 500);

/// The store is cut off (connections reset, new ones refused) for the
/// stated bound, starting just before a renewal every third of the window
/// would have gone: the command runs on to its own end and exit code.
async fn an_outage_of_the_bound_ends_nothing(kind: StoreKind) {
    let (server, namespace, proxy) =
        Server::proxied(kind, "outage", 1, Duration::from_secs(30)).await;
    let (through_proxy, _) = server.holder_url(proxy.port(), 0);
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let line = format!(
        "touch {}; sleep {}; exit 7",
        started.display(),
        (BOUND + Duration::from_secs(5)).as_secs_f64()
    );
    let run = Command::new(BIN)
        .arg("run")
        .args(store_flags(kind, &through_proxy, &namespace))
        .args([
            "--ttl",
            "8s",
            "--session-timeout",
            "8s",
            "--kill-after",
            "1s",
        ])
        .args(["--pool", "outage", "--", "sh", "-c", &line])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    while !started.exists() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(2_400)).await;
    proxy.cut();
    tokio::time::sleep(BOUND).await;
    proxy.restore();
    let out = tokio::task::spawn_blocking(move || run.wait_with_output().unwrap())
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(7),
        "an outage of {BOUND:?} ended the command on {}: {}",
        kind.name(),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_of_the_bound_under_run_on_postgres_ends_nothing() {
    an_outage_of_the_bound_ends_nothing(StoreKind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_of_the_bound_under_run_on_redis_ends_nothing() {
    an_outage_of_the_bound_ends_nothing(StoreKind::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_of_the_bound_under_run_on_mysql_ends_nothing() {
    an_outage_of_the_bound_ends_nothing(StoreKind::Mysql).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_of_the_bound_under_run_on_etcd_ends_nothing() {
    an_outage_of_the_bound_ends_nothing(StoreKind::Etcd).await;
}

/// A command that ends while the store is cut off: `run` cannot return
/// the lease, and says so, with the bound within which the slot frees
/// itself (it said nothing, and the slot stayed taken about 27 s); it
/// still exits with the command's code.
async fn a_command_ending_in_an_outage_is_reported_with_its_bound(kind: StoreKind) {
    let (server, namespace, proxy) =
        Server::proxied(kind, "ended-cut-off", 1, Duration::from_secs(30)).await;
    let (through_proxy, _) = server.holder_url(proxy.port(), 0);
    let dir = tempfile::tempdir().unwrap();
    let (started, go) = (dir.path().join("started"), dir.path().join("go"));
    let line = format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.05; done; exit 3",
        started.display(),
        go.display()
    );
    let run = Command::new(BIN)
        .arg("run")
        .args(store_flags(kind, &through_proxy, &namespace))
        .args(["--ttl", "20s", "--session-timeout", "20s"])
        .args(["--pool", "ended-cut-off", "--", "sh", "-c", &line])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    while !started.exists() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    proxy.cut();
    std::fs::write(&go, b"").unwrap();
    let out = tokio::task::spawn_blocking(move || run.wait_with_output().unwrap())
        .await
        .unwrap();
    proxy.restore();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("could not be returned") && stderr.contains("within 20s"),
        "it says the slot stays taken, and for how long at most: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_ending_in_an_outage_on_postgres_is_reported() {
    a_command_ending_in_an_outage_is_reported_with_its_bound(StoreKind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_ending_in_an_outage_on_redis_is_reported() {
    a_command_ending_in_an_outage_is_reported_with_its_bound(StoreKind::Redis).await;
}
