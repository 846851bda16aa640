//! What `semaphore run` and the script subcommands check before they take
//! a slot, and which store they open.

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use common::BIN;
use common::process::run;
use semaphore_sqlite::{Pool, PoolId, SqliteStore};

fn pool(db: &Path, name: &str) -> Pool {
    Pool::new(
        Arc::new(SqliteStore::open(db).unwrap()),
        PoolId::from_name(name),
    )
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A command with the store's environment variables cleared, so that the
/// tests do not depend on the caller's.
fn semaphore(args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env_remove("SEMAPHORE_DB")
        .env_remove("SEMAPHORE_PG_URL");
    command
}

/// Fewer devices than slots is refused before borrowing: here the pool is
/// full, so a run that borrowed first would wait and then fail with 75.
#[tokio::test]
async fn too_few_devices_are_refused_before_borrowing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("d.db");
    let pool = pool(&db, "gpus");
    pool.register(4).await.unwrap();
    let held: Vec<_> = futures_held(&pool, 4).await;
    let output = run(
        &db,
        &[
            "--pool",
            "gpus",
            "--devices",
            "0,1",
            "--wait",
            "2s",
            "--",
            "true",
        ],
    )
    .output()
    .unwrap();
    assert_eq!(output.status.code(), Some(64), "{}", stderr(&output));
    assert!(stderr(&output).contains("--devices"), "{}", stderr(&output));
    drop(held);
}

/// The pool can grow while a run waits: a position past `--devices` gets no
/// device, so the run returns the lease and fails with 64 rather than run
/// the command with `CUDA_VISIBLE_DEVICES=""`.
#[tokio::test]
async fn a_position_without_a_device_after_the_wait_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("g.db");
    let ran = dir.path().join("ran");
    let pool = pool(&db, "gpus");
    pool.register(2).await.unwrap();
    let held = futures_held(&pool, 2).await;
    let child = run(
        &db,
        &[
            "--pool",
            "gpus",
            "--devices",
            "0,1",
            "--wait",
            "60s",
            "--",
            "touch",
        ],
    )
    .arg(&ran)
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    // Past the check before the wait: queued in the file.
    let file = rusqlite::Connection::open(&db).unwrap();
    common::process::until(Duration::from_secs(30), "the run queueing", || {
        file.query_row("SELECT count(*) FROM semaphore_waiters", [], |row| {
            row.get::<_, i64>(0)
        })
        .unwrap_or(0)
            == 1
    });
    pool.register(3).await.unwrap();
    let output = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let said = stderr(&output);
    assert_eq!(output.status.code(), Some(64), "{said}");
    assert!(said.contains("position 2"), "{said}");
    assert!(!ran.exists(), "the command ran without a device");
    assert_eq!(
        pool.inspect().await.unwrap().in_use,
        2,
        "the lease was kept"
    );
    drop(held);
}

/// An empty name in `--devices` (`0,,1`) is a usage error, not a device.
#[test]
fn an_empty_device_name_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("e.db");
    let output = run(
        &db,
        &[
            "--pool",
            "p",
            "--count",
            "3",
            "--devices",
            "0,,1",
            "--",
            "true",
        ],
    )
    .output()
    .unwrap();
    let said = stderr(&output);
    assert_eq!(output.status.code(), Some(64), "{said}");
    assert!(said.contains("empty"), "{said}");
}

/// A device named twice in `--devices` (`0,0`) would give two slots one
/// GPU: a usage error (64) naming the device, before anything is
/// registered or borrowed.
#[tokio::test]
async fn a_repeated_device_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("r.db");
    let ran = dir.path().join("ran");
    let output = run(
        &db,
        &[
            "--pool",
            "gpus",
            "--count",
            "3",
            "--devices",
            "0,gpu-7,gpu-7",
            "--",
            "touch",
        ],
    )
    .arg(&ran)
    .output()
    .unwrap();
    let said = stderr(&output);
    assert_eq!(output.status.code(), Some(64), "{said}");
    assert!(said.contains("\"gpu-7\""), "names the device: {said}");
    assert!(!ran.exists(), "the command ran");
    assert!(
        matches!(
            pool(&db, "gpus").inspect().await,
            Err(semaphore_sqlite::Error::PoolNotFound { .. })
        ),
        "registered before the refusal"
    );
}

async fn futures_held(pool: &Pool, n: usize) -> Vec<semaphore_sqlite::Lease> {
    let mut held = Vec::new();
    for _ in 0..n {
        held.push(
            pool.try_borrow(Duration::from_secs(600))
                .await
                .unwrap()
                .forget(),
        );
    }
    held
}

/// A missing or non-executable command fails with 127 or 126, with an
/// error from `semaphore`, and takes no slot.
#[tokio::test]
async fn a_missing_or_non_executable_command_fails_before_borrowing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("m.db");
    let script = dir.path().join("not-executable.sh");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    let script = script.display().to_string();
    pool(&db, "p").register(1).await.unwrap();
    for (command, code) in [
        ("no-such-command-7c1f", 127),
        ("./no/such/file", 127),
        (script.as_str(), 126),
        ("/", 126),
    ] {
        let output = run(&db, &["--pool", "p", "--count", "1", "--", command])
            .output()
            .unwrap();
        let said = stderr(&output);
        assert_eq!(output.status.code(), Some(code), "{command}: {said}");
        assert!(said.starts_with("semaphore: "), "{command}: {said}");
        assert!(said.contains(command), "{command}: {said}");
    }
    let state = pool(&db, "p").inspect().await.unwrap();
    assert_eq!(state.in_use, 0);
}

#[tokio::test]
async fn a_zero_wait_says_0s() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("w.db");
    let pool = pool(&db, "p");
    pool.register(1).await.unwrap();
    let _held = futures_held(&pool, 1).await;
    let output = run(&db, &["--pool", "p", "--wait", "0", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(75));
    assert!(stderr(&output).contains("within 0s"), "{}", stderr(&output));
}

#[test]
fn an_empty_pool_name_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("e.db").display().to_string();
    for args in [
        vec![
            "run", "--sqlite", &db, "--pool", "", "--count", "1", "--", "true",
        ],
        vec!["inspect", "--sqlite", &db, "--pool", ""],
    ] {
        let output = semaphore(&args).output().unwrap();
        assert_eq!(
            output.status.code(),
            Some(64),
            "{args:?}: {}",
            stderr(&output)
        );
    }
}

/// `inspect`, `pools` and `status` only read: a SQLite file that is not
/// there is refused (exit 66, naming it), not created empty, so that a
/// mistyped path does not pass for a store without pools.
#[test]
fn reading_commands_refuse_a_missing_database_and_create_none() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("typo.db");
    let path = db.display().to_string();
    for args in [
        vec!["inspect", "--sqlite", &path, "--pool", "gpus"],
        vec!["pools", "--sqlite", &path],
        vec!["status", "--sqlite", &path],
    ] {
        let output = semaphore(&args).output().unwrap();
        assert_eq!(
            output.status.code(),
            Some(66),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains(&path),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(!db.exists(), "{args:?} created {path}");
    }
}

#[tokio::test]
async fn holders_json_gives_null_for_no_owner() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("h.db");
    let pool = pool(&db, "p");
    pool.register(1).await.unwrap();
    let _held = futures_held(&pool, 1).await;
    let output = semaphore(&["holders", "--json", "--sqlite"])
        .arg(&db)
        .args(["--pool", "p"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let line: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(line["owner"].is_null(), "{line}");
    assert_eq!(line["position"], 0);
}

/// A store flag wins over another store's environment variable.
#[test]
fn a_flag_wins_over_another_stores_environment_variable() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("f.db");
    let url = semaphore_postgres::testing::TestServer::shared().url();
    let schema = semaphore_postgres::testing::TestServer::fresh_schema();
    // SEMAPHORE_DB set, --postgres given: the PostgreSQL store is used.
    let output = semaphore(&["inspect", "--postgres", url, "--postgres-schema", &schema])
        .args(["--pool", "p"])
        .env("SEMAPHORE_DB", &db)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(69), "{}", stderr(&output));
    assert!(!db.exists(), "the SQLite file of SEMAPHORE_DB was opened");
    // SEMAPHORE_PG_URL set (to nothing that answers), --sqlite given.
    let output = semaphore(&["register", "--count", "2", "--pool", "p", "--sqlite"])
        .arg(&db)
        .env("SEMAPHORE_PG_URL", "host=127.0.0.1 port=1 user=nobody")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
}

/// `serve --memory` and `serve --sqlite` start whatever SEMAPHORE_PG_URL
/// says.
#[test]
fn serve_flags_win_over_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db").display().to_string();
    for flags in [vec!["--memory"], vec!["--sqlite", &db]] {
        let mut server = Command::new(BIN)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(&flags)
            .env("SEMAPHORE_PG_URL", "host=127.0.0.1 port=1 user=nobody")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(server.stdout.take().unwrap()),
            &mut first,
        )
        .unwrap();
        let _ = server.kill();
        let _ = server.wait();
        assert!(first.starts_with("listening on "), "{flags:?}: {first:?}");
    }
}

/// `serve` and the other subcommands default to the same file: a pool
/// registered through a default server is found by a default `inspect`.
#[tokio::test]
async fn serve_and_inspect_share_one_default_file() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let env = |c: &mut Command| {
        c.env("HOME", home.path())
            .env_remove("XDG_DATA_HOME")
            .env_remove("SEMAPHORE_DB")
            .env_remove("SEMAPHORE_PG_URL")
            .current_dir(cwd.path());
    };
    let mut serve = Command::new(BIN);
    serve
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped());
    env(&mut serve);
    let mut server = serve.spawn().unwrap();
    let mut first = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(server.stdout.take().unwrap()),
        &mut first,
    )
    .unwrap();
    let address = first
        .strip_prefix("listening on ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .to_string();
    let id = uuid::Uuid::new_v4().to_string();
    let response = reqwest::Client::new()
        .put(format!("{address}/l/{id}"))
        .json(&serde_json::json!({"count": 3}))
        .send()
        .await
        .unwrap();
    let _ = server.kill();
    let _ = server.wait();
    assert!(response.status().is_success());
    let mut inspect = Command::new(BIN);
    inspect.args(["inspect", "--json", "--pool-id", &id]);
    env(&mut inspect);
    let output = inspect.output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let state: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(state["count"], 3);
}

/// `serve --help` states the MySQL wake-up bound it can keep where no ring
/// comes: the poll interval plus the poll's round trip, not "within
/// 100 ms" (measured 100.6-103.4 ms).
#[test]
fn serve_help_states_the_mysql_wake_up_bound_it_keeps() {
    let output = semaphore(&["serve", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{help}");
    assert!(!help.contains("within 100 ms"), "{help}");
    assert!(help.contains("100 ms plus the poll's round trip"), "{help}");
}

/// The READMEs that name MySQL's cross-process wake-up state the bound it
/// keeps where no ring comes, the poll interval plus one query's round
/// trip, not the interval alone (measured 100.7 ms with a 100 ms poll).
#[test]
fn readmes_state_the_mysql_wake_up_bound_it_keeps() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for readme in [
        "README.md",
        "semaphore-cli/README.md",
        "semaphore-mysql/README.md",
    ] {
        let text = std::fs::read_to_string(root.join(readme)).unwrap();
        let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains("the poll interval plus one query's round trip"),
            "{readme} does not state the bound"
        );
        assert!(!flat.contains("within 100 ms"), "{readme}");
    }
}
