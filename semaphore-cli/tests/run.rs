//! `semaphore run` with real processes and real files (the CLI's README).

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use semaphore_sqlite::{Pool, PoolId, SqliteStore};

const BIN: &str = env!("CARGO_BIN_EXE_semaphore");

fn run(db: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command.args(["run", "--sqlite"]).arg(db).args(args);
    command
}

fn code(output: Output) -> i32 {
    output.status.code().expect("an exit code")
}

fn pool(db: &Path, name: &str) -> Pool {
    Pool::new(
        Arc::new(SqliteStore::open(db).unwrap()),
        PoolId::from_name(name),
    )
}

/// Polls `done` up to `guard`; a hang is a failure, not a timing claim.
fn until(guard: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < guard,
            "{what} did not happen within {guard:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn twelve_runs_on_three_slots_never_share_a_slot() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("r.db");
    let script = r#"set -C; : > "$DIR/slot-$SEMAPHORE_POSITION" || exit 9; echo "$SEMAPHORE_POSITION" >> "$DIR/log"; sleep 0.1; rm "$DIR/slot-$SEMAPHORE_POSITION""#;
    let children: Vec<_> = (0..12)
        .map(|_| {
            run(
                &db,
                &["--pool", "p", "--count", "3", "--", "sh", "-c", script],
            )
            .env("DIR", dir.path())
            .spawn()
            .unwrap()
        })
        .collect();
    for child in children {
        assert_eq!(
            code(child.wait_with_output().unwrap()),
            0,
            "a run failed (9: a slot held twice)"
        );
    }
    let log = std::fs::read_to_string(dir.path().join("log")).unwrap();
    let positions: Vec<u32> = log.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(positions.len(), 12);
    assert!(positions.iter().all(|p| *p < 3), "{positions:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_follow_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("e.db");
    let sh = |line: &str| {
        vec!["--pool", "p", "--count", "1", "--", "sh", "-c", line]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>()
    };
    let status = |args: Vec<String>| {
        code(
            run(&db, &args.iter().map(String::as_str).collect::<Vec<_>>())
                .output()
                .unwrap(),
        )
    };
    assert_eq!(status(sh("exit 3")), 3, "the child's own code");
    assert_eq!(status(sh("exit 0")), 0);
    assert_eq!(status(sh("kill -TERM $$")), 128 + 15, "killed by signal 15");
    let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        status(words(&["--pool", "p", "--", "/nonexistent/command"])),
        127
    );
    let plain_file = dir.path().join("not-executable");
    std::fs::write(&plain_file, "data").unwrap();
    let plain_file = plain_file.to_str().unwrap();
    assert_eq!(status(words(&["--pool", "p", "--", plain_file])), 126);
    assert_eq!(
        status(words(&["--pool", "never-registered", "--", "true"])),
        69
    );
    assert_eq!(status(words(&["--pool", "p"])), 64, "usage: no command");
    assert_eq!(
        status(words(&["--pool", "p", "--wait", "soon", "--", "true"])),
        64,
        "usage: a bad duration"
    );
    let unwritable = code(
        Command::new(BIN)
            .args([
                "run",
                "--sqlite",
                "/nonexistent-dir/x.db",
                "--pool",
                "p",
                "--",
                "true",
            ])
            .output()
            .unwrap(),
    );
    assert_eq!(unwritable, 74, "storage");

    // A full pool: --wait 0 exits 75 at once, or -E's code.
    let full = pool(&db, "p");
    let held = full.try_borrow(Duration::from_secs(60)).await.unwrap();
    assert_eq!(
        status(words(&["--pool", "p", "--wait", "0s", "--", "true"])),
        75
    );
    assert_eq!(
        status(words(&[
            "--pool", "p", "--wait", "0s", "-E", "42", "--", "true"
        ])),
        42
    );
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrapper_killed_with_sigkill_takes_its_child_down_and_the_slot_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("k.db");
    let pidfile = dir.path().join("child.pid");
    let line = format!("echo $$ > {}; exec sleep 60", pidfile.display());
    let mut wrapper = run(
        &db,
        &[
            "--pool", "p", "--count", "1", "--ttl", "2s", "--", "sh", "-c", &line,
        ],
    )
    .stdout(Stdio::null())
    .spawn()
    .unwrap();
    until(Duration::from_secs(10), "the child starting", || {
        std::fs::read_to_string(&pidfile).is_ok_and(|p| p.ends_with('\n'))
    });
    let child = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .to_string();
    wrapper.kill().unwrap(); // SIGKILL
    wrapper.wait().unwrap();
    until(
        Duration::from_secs(10),
        "the child dying with its wrapper",
        || {
            !Path::new(&format!("/proc/{child}")).exists()
                || std::fs::read_to_string(format!("/proc/{child}/stat"))
                    .is_ok_and(|s| s.contains(") Z "))
        },
    );
    let pool = pool(&db, "p");
    let start = Instant::now();
    while pool.inspect().await.unwrap().in_use != 0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the slot never came back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_stops_the_child_and_exits_70() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("l.db");
    let wrapper = run(
        &db,
        &[
            "--pool", "p", "--count", "1", "--ttl", "1s", "--", "sleep", "60",
        ],
    )
    .spawn()
    .unwrap();
    let pool = pool(&db, "p");
    while pool.inspect().await.map(|s| s.in_use).unwrap_or(0) != 1 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(pool.force_return(0).await.unwrap().is_some());
    let output = tokio::task::spawn_blocking(move || wrapper.wait_with_output().unwrap())
        .await
        .unwrap();
    assert_eq!(code(output), 70);
}

#[test]
fn signals_reach_the_child_and_its_exit_code_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let ready = dir.path().join("ready");
    let line = format!(
        "trap 'exit 7' USR1; touch {}; while :; do sleep 0.05; done",
        ready.display()
    );
    let wrapper = run(
        &db,
        &["--pool", "p", "--count", "1", "--", "sh", "-c", &line],
    )
    .spawn()
    .unwrap();
    until(Duration::from_secs(10), "the child starting", || {
        ready.exists()
    });
    let pid = wrapper.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-USR1", &pid])
            .status()
            .unwrap()
            .success()
    );
    assert_eq!(
        code(wrapper.wait_with_output().unwrap()),
        7,
        "the child's own exit code"
    );
}

#[test]
fn script_subcommands_borrow_renew_list_and_return_a_lease() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sub.db");
    let script = format!(
        r#"S={BIN}; D={db}
        eval "$($S borrow --sqlite $D --pool jobs --count 1 --ttl 60s)" || exit 11
        [ "$SEMAPHORE_POSITION" = 0 ] || exit 12
        $S holders --sqlite $D --pool jobs | grep -q " $SEMAPHORE_LEASE_ID$" || exit 13
        $S renew --sqlite $D --pool jobs --ttl 90s > /dev/null || exit 14
        $S borrow --sqlite $D --pool jobs > /dev/null 2>&1; [ $? = 75 ] || exit 15
        [ "$($S return --sqlite $D --pool jobs)" = "returned: true" ] || exit 16
        [ "$($S return --sqlite $D --pool jobs)" = "returned: false" ] || exit 17
        $S renew --sqlite $D --pool jobs > /dev/null 2>&1; [ $? = 69 ] || exit 18
        [ "$($S inspect --sqlite $D --pool jobs)" = "count 1 in_use 0 available 1" ] || exit 19"#,
        db = db.display()
    );
    let output = Command::new("sh").args(["-c", &script]).output().unwrap();
    assert_eq!(
        code(output),
        0,
        "the step whose number is the exit code failed"
    );
}

/// `semaphore run --redis`: runs on a shared Redis server, and hands the
/// command its slot as on every other store.
#[test]
fn runs_on_a_redis_server() {
    let (server, prefix) = (
        semaphore_redis::testing::TestServer::shared(),
        semaphore_redis::testing::TestServer::fresh_prefix(),
    );
    let output = Command::new(BIN)
        .args(["run", "--redis", server.url(), "--redis-prefix", &prefix])
        .args([
            "--redis-restart-grace",
            "0s",
            "--pool",
            "gpu",
            "--count",
            "2",
        ])
        .args([
            "--",
            "sh",
            "-c",
            "echo \"$SEMAPHORE_POSITION $SEMAPHORE_POOL\"",
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(said.starts_with("0 "), "{said}");
}

/// `semaphore run --mysql`: twelve processes on three slots of a MySQL
/// pool never hold one slot at once, and every run
/// gets its turn (waiters learn of other processes' returns by the
/// store's poll).
#[test]
fn twelve_runs_on_a_mysql_database_never_share_a_slot() {
    let (server, prefix) = (
        semaphore_mysql::testing::TestServer::shared(),
        semaphore_mysql::testing::TestServer::fresh_prefix(),
    );
    let dir = tempfile::tempdir().unwrap();
    let script = r#"set -C; : > "$DIR/slot-$SEMAPHORE_POSITION" || exit 9; echo "$SEMAPHORE_POSITION" >> "$DIR/log"; sleep 0.1; rm "$DIR/slot-$SEMAPHORE_POSITION""#;
    let children: Vec<_> = (0..12)
        .map(|_| {
            Command::new(BIN)
                .args(["run", "--mysql", server.url(), "--mysql-prefix", &prefix])
                .args(["--pool", "p", "--count", "3", "--wait", "60s"])
                .args(["--", "sh", "-c", script])
                .env("DIR", dir.path())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        assert_eq!(code(child.wait_with_output().unwrap()), 0, "a run failed");
    }
    let log = std::fs::read_to_string(dir.path().join("log")).unwrap();
    assert_eq!(log.lines().count(), 12, "{log}");
    assert!(log.lines().all(|p| ["0", "1", "2"].contains(&p)), "{log}");
}

/// `semaphore run --etcd`: twelve processes on three slots of a pool on
/// etcd never hold one slot at once, and every run gets its turn (waiters
/// learn of other processes' returns by the store's watch).
#[test]
fn twelve_runs_on_an_etcd_cluster_never_share_a_slot() {
    use semaphore_etcd::testing::TestCluster;
    let (urls, prefix) = (
        TestCluster::shared().endpoints().join(","),
        TestCluster::fresh_prefix(),
    );
    let dir = tempfile::tempdir().unwrap();
    let script = r#"set -C; : > "$DIR/slot-$SEMAPHORE_POSITION" || exit 9; echo "$SEMAPHORE_POSITION" >> "$DIR/log"; sleep 0.1; rm "$DIR/slot-$SEMAPHORE_POSITION""#;
    let children: Vec<_> = (0..12)
        .map(|_| {
            Command::new(BIN)
                .args(["run", "--etcd", &urls, "--etcd-prefix", &prefix])
                .args(["--pool", "p", "--count", "3", "--wait", "60s"])
                .args(["--", "sh", "-c", script])
                .env("DIR", dir.path())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        assert_eq!(code(child.wait_with_output().unwrap()), 0, "a run failed");
    }
    let log = std::fs::read_to_string(dir.path().join("log")).unwrap();
    assert_eq!(log.lines().count(), 12, "{log}");
    assert!(log.lines().all(|p| ["0", "1", "2"].contains(&p)), "{log}");
}

/// `--slots 2` holds two slots as one lease while CMD runs; CMD gets
/// both positions and the device of each, and both come back when it ends.
/// A 2-GPU job on a 4-GPU pool with slot 0 taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_two_gives_the_command_two_positions_and_their_devices() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("gpus.db");
    let pool = pool(&db, "gpus");
    pool.register(4).await.unwrap();
    let first = pool
        .borrow(Duration::from_secs(60), Duration::ZERO)
        .await
        .unwrap();
    let output = run(
        &db,
        &[
            "--pool",
            "gpus",
            "--slots",
            "2",
            "--devices",
            "gpu-a,gpu-b,gpu-c,gpu-d",
            "--",
            "sh",
            "-c",
            "echo \"$SEMAPHORE_POSITION $SEMAPHORE_POSITIONS $CUDA_VISIBLE_DEVICES {positions}\"",
        ],
    )
    .stderr(Stdio::inherit())
    .output()
    .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        "1 1,2 gpu-b,gpu-c 1,2"
    );
    assert_eq!(pool.inspect().await.unwrap().in_use, 1, "both came back");
    drop(first);

    // More slots than the largest count allowed: a usage error, nothing held.
    let output = run(&db, &["--pool", "gpus", "--slots", "1001", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(code(output), 64);
    let output = run(&db, &["--pool", "gpus", "--slots", "0", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(code(output), 64, "clap refuses 0");
    assert_eq!(pool.inspect().await.unwrap().in_use, 0);
}
