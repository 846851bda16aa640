//! The loadable extension (crate `semaphore-sqlite-ext`) on one file with
//! Rust processes: Debian's `python3` (whose `sqlite3` loads extensions)
//! and the `sqlite3` shell load the extension file, built here from the
//! crate; Rust processes are this test binary run again as workers.
//!
//! What a shared pool must never show, checked from each holder's own
//! record of when it held which position: a position held by two at once,
//! a token granted after another's return that is not above it, a waiter
//! stuck while slots are returned.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use extension_support::{
    POOL, Talking, extension, file_with_pool, python, python_on, rust_store, said, unix_ns,
};
use semaphore_sqlite::{Pool, PoolId, SqliteOptions, SqliteStore};

mod extension_support;

const WORKER: &str = "SEMAPHORE_EXT_TEST_WORKER";

/// One holding, as its holder saw it, in unix ns: `asked` before the
/// borrow attempt that was granted, `from` after its answer, `to` before
/// the return was asked, `returned` after its answer. The grant came
/// after `asked` and the lease ended before `returned`; `from..to` is
/// inside the real holding, so two that overlap on a position are two
/// holders at once.
#[derive(Debug, Clone, Copy)]
struct Held {
    position: u32,
    token: u64,
    asked: u128,
    from: u128,
    to: u128,
    returned: u128,
}

/// The `held` lines of a worker's output (a Rust worker's has the test
/// harness's lines too).
fn parse(out: &[u8]) -> Vec<Held> {
    String::from_utf8_lossy(out)
        .lines()
        .filter_map(|line| line.strip_prefix("held "))
        .map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            Held {
                position: f[0].parse().unwrap(),
                token: f[1].parse().unwrap(),
                asked: f[2].parse().unwrap(),
                from: f[3].parse().unwrap(),
                to: f[4].parse().unwrap(),
                returned: f[5].parse().unwrap(),
            }
        })
        .collect()
}

/// No position held twice at once, every position below `count`, and a
/// borrow asked after another lease's return was answered got the larger
/// token (tokens grow in the order of the grants).
fn check(all: &[Held], count: u32) {
    for (i, a) in all.iter().enumerate() {
        assert!(
            a.position < count,
            "position {} of a pool of {count}",
            a.position
        );
        for b in &all[i + 1..] {
            assert!(
                a.position != b.position || a.to <= b.from || b.to <= a.from,
                "position {} held twice at once: {a:?} and {b:?}",
                a.position
            );
            let (first, then) = if a.returned < b.asked { (a, b) } else { (b, a) };
            if first.returned < then.asked {
                assert!(
                    first.token < then.token,
                    "token {} granted after token {} was returned",
                    then.token,
                    first.token
                );
            }
        }
    }
}

/// The Rust side of the load test when this binary runs as a worker:
/// `rounds` borrows (waiting, so queued as a head that no Python caller
/// may pass), each held a moment, each printed as a [`Held`].
#[tokio::test]
async fn rust_worker() {
    let Ok(spec) = std::env::var(WORKER) else {
        return;
    };
    let (db, rounds) = spec.split_once('|').unwrap();
    let (_store, pool) = rust_store(Path::new(db)).await;
    let mut out = String::new();
    for _ in 0..rounds.parse::<u32>().unwrap() {
        let asked = unix_ns();
        let guard = pool
            .borrow(Duration::from_secs(30), Duration::from_secs(60))
            .await
            .expect("a Rust worker's borrow");
        let from = unix_ns();
        tokio::time::sleep(Duration::from_micros(300)).await;
        let (position, token) = (guard.lease().position, guard.lease().token);
        let to = unix_ns();
        assert!(guard.release().await.unwrap(), "returned while active");
        let returned = unix_ns();
        out.push_str(&format!(
            "held {position} {token} {asked} {from} {to} {returned}\n"
        ));
    }
    print!("{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_rust_processes_share_a_pool_and_never_hold_a_slot_twice() {
    let (_dir, db, pool) = file_with_pool("shared.db", 3).await;
    let (python_rounds, rust_rounds) = (60, 60);
    let mut children = Vec::new();
    for _ in 0..4 {
        let mut python = python_on(
            &db,
            "pool, rounds = sys.argv[3], int(sys.argv[4])\n\
             for _ in range(rounds):\n\
             \x20   while True:\n\
             \x20       asked = time.time_ns()\n\
             \x20       got = q('SELECT semaphore_borrow(?, 30000, NULL, ?)', pool, 'py')\n\
             \x20       if got: break\n\
             \x20       time.sleep(0.0005)\n\
             \x20   lease = json.loads(got)\n\
             \x20   start = time.time_ns()\n\
             \x20   time.sleep(0.0003)\n\
             \x20   end = time.time_ns()\n\
             \x20   assert q('SELECT semaphore_return(?, ?)', pool, lease['lease']) == 1\n\
             \x20   returned = time.time_ns()\n\
             \x20   print('held', lease['position'], lease['token'], asked, start, end, returned, flush=True)\n",
        );
        python.arg(POOL).arg(python_rounds.to_string());
        children.push(python.stdout(Stdio::piped()).spawn().unwrap());
    }
    for _ in 0..3 {
        let rust = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "rust_worker", "--nocapture", "--quiet"])
            .env(WORKER, format!("{}|{rust_rounds}", db.display()))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        children.push(rust);
    }
    let outputs = tokio::task::spawn_blocking(move || {
        children
            .into_iter()
            .map(|child| child.wait_with_output().unwrap())
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    let mut all = Vec::new();
    for out in &outputs {
        assert!(out.status.success(), "a worker failed: {out:?}");
        all.extend(parse(&out.stdout));
    }
    assert_eq!(
        all.len(),
        4 * python_rounds + 3 * rust_rounds,
        "every round held once"
    );
    check(&all, 3);
    assert_eq!(pool.inspect().await.unwrap().in_use, 0, "every slot back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_return_rings_a_rust_waiter_and_a_rolled_back_borrow_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("wake.db");
    drop(SqliteStore::open(&db).unwrap());
    // No file watch, no poll: only the ring after the Python return's
    // commit can wake the Rust waiter before its wait runs out.
    let store =
        Arc::new(SqliteStore::open_with(&db, SqliteOptions::default().rings_only()).unwrap());
    let pool = Pool::new(store.clone(), PoolId::from_name(POOL));
    pool.register(1).await.unwrap();
    // Python holds the slot until told (a line on its stdin), returns it,
    // then borrows inside a transaction it rolls back.
    let mut python = Talking::start(
        &db,
        "pool = sys.argv[3]\n\
         lease = json.loads(q('SELECT semaphore_borrow(?, 600000)', pool))\n\
         print('held', flush=True)\n\
         sys.stdin.readline()\n\
         assert q('SELECT semaphore_return(?, ?)', pool, lease['lease']) == 1\n\
         print('again', q('SELECT semaphore_borrow(?, 600000)', pool) is None, flush=True)\n\
         c.execute('CREATE TABLE IF NOT EXISTS jobs (token INTEGER)')\n\
         sys.stdin.readline()\n\
         c.execute('BEGIN IMMEDIATE')\n\
         got = q('SELECT semaphore_borrow(?, 600000)', pool)\n\
         c.execute('INSERT INTO jobs VALUES (?)', (json.loads(got)['token'],))\n\
         c.execute('ROLLBACK')\n\
         print('rolled back', flush=True)\n",
    );
    assert_eq!(python.line(), "held");
    let waiter = {
        let pool = pool.clone();
        tokio::spawn(async move {
            pool.borrow_owned(Duration::from_secs(30), Duration::from_secs(60))
                .await
        })
    };
    // Queued in the file, where the Python caller must see it.
    while store.queue_heads(pool.id()).await.unwrap() == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    python.tell();
    assert_eq!(
        python.line(),
        "again True",
        "a Python borrow took the slot the Rust head was owed"
    );
    let guard = waiter.await.unwrap().expect("the Rust waiter, served");
    assert_eq!(guard.lease().position, 0);
    assert!(guard.release().await.unwrap());
    python.tell();
    assert_eq!(python.line(), "rolled back");
    assert!(python.end());
    assert_eq!(
        pool.inspect().await.unwrap().in_use,
        0,
        "nothing left by the rollback"
    );
    let jobs: i64 = semaphore_sqlite::rusqlite::Connection::open(&db)
        .unwrap()
        .query_row("SELECT count(*) FROM jobs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(jobs, 0);
}

#[test]
#[should_panic(expected = "held twice at once")]
fn the_check_catches_two_holders_at_once() {
    let held = |token, from, to| Held {
        position: 1,
        token,
        asked: from - 1,
        from,
        to,
        returned: to + 1,
    };
    check(&[held(1, 10, 20), held(2, 15, 30)], 2);
}

#[test]
#[should_panic(expected = "was returned")]
fn the_check_catches_a_token_that_went_backwards() {
    let held = |position, token, from, to| Held {
        position,
        token,
        asked: from - 1,
        from,
        to,
        returned: to + 1,
    };
    check(&[held(0, 5, 10, 20), held(1, 4, 30, 40)], 2);
}

#[test]
fn the_sqlite3_shell_borrows_and_returns_by_name_or_uuid_with_weights_and_keys() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shell.db");
    let sql = format!(
        ".load {}\n\
         SELECT semaphore_register('{POOL}', 2) IS NOT NULL;\n\
         SELECT json_extract(semaphore_borrow('{POOL}', 60000), '$.position');\n\
         SELECT json_extract(semaphore_borrow('{POOL}', 60000, NULL, 'shell'), '$.position');\n\
         SELECT semaphore_borrow('{POOL}', 60000) IS NULL;\n\
         SELECT semaphore_return('{POOL}', json_extract(semaphore_holders('{POOL}', 1), '$[0].lease'));\n\
         SELECT json_extract(semaphore_inspect('{POOL}'), '$.in_use');\n\
         SELECT json_extract(semaphore_inspect('{uuid}'), '$.count');\n\
         SELECT json_extract(semaphore_borrow('{POOL}', 60000, 2), '$.positions') IS NULL;\n\
         SELECT semaphore_register('{POOL}', 3) IS NOT NULL;\n\
         SELECT json_extract(semaphore_borrow('{POOL}', 60000, 2, NULL, 'job-7'), '$.positions');\n\
         SELECT json_extract(semaphore_borrow('{POOL}', 60000, 2, NULL, 'job-7'), '$.positions');\n\
         SELECT json_extract(semaphore_inspect('{POOL}'), '$.in_use');\n",
        extension().display(),
        uuid = PoolId::from_name(POOL),
    );
    let mut shell = Command::new("sqlite3")
        .arg(&db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the sqlite3 shell (apt-get install sqlite3; scripts/test does)");
    shell
        .stdin
        .take()
        .unwrap()
        .write_all(sql.as_bytes())
        .unwrap();
    let out = shell.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Registered, 0, 1, full, returned, in use 1; the same pool by its
    // UUID; a weight of 2 refused with one slot free; the count raised to
    // 3; a keyed borrow of 2 slots, and its retry answered with the same
    // lease; 3 in use.
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "1\n0\n1\n1\n1\n1\n2\n1\n1\n[0,2]\n[0,2]\n3\n"
    );
}

#[test]
fn the_readmes_python_example_runs_as_written() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    // The Python example of the loadable extension (the README has the
    // Python module's too).
    let example = readme
        .split("```python\n")
        .skip(1)
        .map(|block| &block[..block.find("```").unwrap()])
        .find(|block| block.contains("load_extension"))
        .expect("the README's Python example of the extension");
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(python())
        .arg("-c")
        .arg(example)
        .current_dir(dir.path())
        .env("SEMAPHORE_EXT", extension())
        .output()
        .unwrap();
    assert_eq!(said(&out), "slot 0 token 1\n");
}
