//! The loadable extension (crate `semaphore-sqlite-ext`) on one file with
//! Rust processes: Debian's `python3` (whose `sqlite3` loads extensions)
//! and the `sqlite3` shell load the extension file, built here from the
//! crate; Rust processes are this test binary run again as workers.
//!
//! What a shared pool must never show, checked from each holder's own
//! record of when it held which position: a position held by two at once,
//! a token granted after another's return that is not above it, a waiter
//! stuck while slots are returned.

use std::io::{BufRead, BufReader, Lines, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use semaphore_sqlite::{Pool, PoolId, SqliteOptions, SqliteStore};

const POOL: &str = "shared-gpus";
const WORKER: &str = "SEMAPHORE_EXT_TEST_WORKER";

/// The extension file, built once per run from `semaphore-sqlite-ext`
/// (its own workspace) into `target/ext`.
fn extension() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let target = root.join("target").join("ext");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "--quiet", "--manifest-path"])
            .arg(root.join("semaphore-sqlite-ext").join("Cargo.toml"))
            .env("CARGO_TARGET_DIR", &target)
            .status()
            .expect("running cargo to build the extension");
        assert!(status.success(), "building semaphore-sqlite-ext failed");
        target.join("debug").join("libsemaphore_sqlite_ext")
    })
}

/// A Python whose `sqlite3` may load extensions: Debian's (`apt-get
/// install python3`); builds that leave extension loading out (pyenv's by
/// default) cannot take part.
fn python() -> &'static str {
    static FOUND: OnceLock<&'static str> = OnceLock::new();
    FOUND.get_or_init(|| {
        ["/usr/bin/python3", "python3"]
            .into_iter()
            .find(|python| {
                Command::new(python)
                    .args([
                        "-c",
                        "import sqlite3; sqlite3.connect(':memory:').enable_load_extension(True)",
                    ])
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            })
            .expect(
                "no python3 whose sqlite3 loads extensions: install Debian's (apt-get install \
                 python3); scripts/test does",
            )
    })
}

/// Python that opens `db` in autocommit with the extension loaded as `c`,
/// then runs `body`; its arguments follow as `sys.argv[3:]`.
fn python_on(db: &Path, body: &str) -> Command {
    let script = format!(
        "import sqlite3, sys, time, json, os\n\
         c = sqlite3.connect(sys.argv[1], timeout=30, isolation_level=None)\n\
         c.enable_load_extension(True)\n\
         c.load_extension(sys.argv[2])\n\
         q = lambda sql, *a: c.execute(sql, a).fetchone()[0]\n{body}"
    );
    let mut command = Command::new(python());
    command.arg("-c").arg(script).arg(db).arg(extension());
    command
}

/// A Python process running `body` on `db` with the pool's name as its
/// argument, talked to a line at a time through its stdin and stdout.
struct Talking {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Talking {
    fn start(db: &Path, body: &str) -> Self {
        let mut child = python_on(db, body)
            .arg(POOL)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Self { child, lines }
    }

    /// Its next line.
    fn line(&mut self) -> String {
        self.lines.next().unwrap().unwrap()
    }

    /// Lets it read a line.
    fn tell(&mut self) {
        writeln!(self.child.stdin.as_mut().unwrap()).unwrap();
    }

    /// Closes its stdin and waits for it to end; whether it succeeded.
    fn end(mut self) -> bool {
        drop(self.child.stdin.take());
        self.child.wait().unwrap().success()
    }
}

/// What a process that must have succeeded printed.
fn said(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn unix_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

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
/// token (R9: tokens grow in the order of the grants).
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

/// A new file in a directory of its own, with the pool registered with
/// `count` slots through a Rust store handle (which the pool keeps).
async fn file_with_pool(name: &str, count: u32) -> (tempfile::TempDir, PathBuf, Pool) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join(name);
    let (_store, pool) = rust_store(&db).await;
    pool.register(count).await.unwrap();
    (dir, db, pool)
}

async fn rust_store(db: &Path) -> (Arc<SqliteStore>, Pool) {
    let store = Arc::new(SqliteStore::open(db).expect("opening the file"));
    let pool = Pool::new(store.clone(), PoolId::from_name(POOL));
    (store, pool)
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
async fn a_killed_python_holders_slot_is_free_at_once() {
    let (_dir, db, pool) = file_with_pool("kill.db", 1).await;
    let mut python = Talking::start(
        &db,
        "print(q('SELECT semaphore_borrow(?, 600000)', sys.argv[3]), flush=True)\n\
         time.sleep(600)\n",
    );
    let line = python.line();
    assert!(
        line.contains("\"position\":0"),
        "the holder's lease: {line}"
    );
    assert_eq!(pool.inspect().await.unwrap().in_use, 1);
    python.child.kill().unwrap();
    python.child.wait().unwrap();
    // Its ttl has ten minutes to run: only its process's end frees it.
    let lease = pool
        .borrow(Duration::from_secs(30), Duration::ZERO)
        .await
        .expect("the killed holder's slot, at once");
    assert_eq!(lease.lease().position, 0);
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
    // Queued in the file, where the Python caller must see it (R11).
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
fn a_file_of_another_shape_is_refused_and_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("other.db");
    let conn = semaphore_sqlite::rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch("CREATE TABLE semaphore_pools (name TEXT)")
        .unwrap();
    drop(conn);
    let before = std::fs::read(&db).unwrap();
    let out = python_on(&db, "print('loaded')\n").output().unwrap();
    assert!(!out.status.success(), "loaded into a file of another shape");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("semaphore_pools"),
        "says what it found: {stderr}"
    );
    assert_eq!(std::fs::read(&db).unwrap(), before, "nothing written");
}

#[test]
fn the_readmes_python_example_runs_as_written() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    let start = readme
        .find("```python\n")
        .expect("the README's Python example")
        + 10;
    let example = &readme[start..start + readme[start..].find("```").unwrap()];
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_connections_lease_lives_as_long_as_its_process() {
    let (_dir, db, pool) = file_with_pool("close.db", 1).await;
    // The extension keeps its statements prepared between calls: the
    // close must still close the files (not leave the connection open).
    // The lease is the process's (R16): it outlives the connection, and
    // ends with the process.
    let mut python = Talking::start(
        &db,
        "got = q('SELECT semaphore_borrow(?, 600000)', sys.argv[3])\n\
         q('SELECT semaphore_holders(?)', sys.argv[3])\n\
         c.close()\n\
         def opened():\n\
         \x20   for fd in os.listdir('/proc/self/fd'):\n\
         \x20       try: yield os.readlink('/proc/self/fd/' + fd)\n\
         \x20       except OSError: pass\n\
         files = {sys.argv[1] + end for end in ('', '-wal', '-shm')}\n\
         print('open' if files & set(opened()) else 'closed', flush=True)\n\
         sys.stdin.readline()\n",
    );
    let line = python.line();
    assert_eq!(
        line, "closed",
        "the connection's files stay open after close"
    );
    assert!(
        pool.borrow(Duration::from_secs(30), Duration::ZERO)
            .await
            .is_err(),
        "the lease ended with its connection, while its process lives"
    );
    assert!(python.end());
    let lease = pool
        .borrow(Duration::from_secs(30), Duration::ZERO)
        .await
        .expect("the slot, once the process is gone");
    assert_eq!(lease.lease().position, 0);
}

#[test]
fn a_program_loads_it_on_many_connections_and_hostile_uses_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("many.db");
    let other = dir.path().join("other.db");
    let out = python_on(
        &db,
        "def loaded(path):\n\
         \x20   d = sqlite3.connect(path, timeout=30, isolation_level=None)\n\
         \x20   d.enable_load_extension(True)\n\
         \x20   d.load_extension(sys.argv[2])\n\
         \x20   return d\n\
         def fails(conn, sql, *args):\n\
         \x20   try:\n\
         \x20       conn.execute(sql, args).fetchall()\n\
         \x20   except sqlite3.Error as e:\n\
         \x20       return str(e)\n\
         \x20   raise SystemExit('not refused: ' + sql)\n\
         q(\"SELECT semaphore_register('p', 2)\")\n\
         d, e = loaded(sys.argv[1]), loaded(sys.argv[3])\n\
         print(json.loads(d.execute(\"SELECT semaphore_inspect('p')\").fetchone()[0])['count'])\n\
         e.execute(\"SELECT semaphore_register('p', 1)\")\n\
         d.close()\n\
         d = loaded(sys.argv[1])\n\
         print(d.execute(\"SELECT json_extract(semaphore_borrow('p', 60000), '$.position')\").fetchone()[0])\n\
         c.execute('CREATE TABLE log (lease TEXT)')\n\
         print(fails(c, \"INSERT INTO log SELECT semaphore_borrow('p', 60000)\"))\n\
         q(\"SELECT semaphore_borrow('p', 60000, 1, NULL, 'job-1')\")\n\
         print(fails(c, \"SELECT semaphore_borrow('p', 60000, 1, NULL, 'job-1', 0)\"))\n\
         c.execute('CREATE TEMP TABLE semaphore_leases (x)')\n\
         print(fails(c, \"SELECT semaphore_borrow('p', 60000)\"))\n\
         c.execute('DROP TABLE temp.semaphore_leases')\n\
         print(json.loads(q(\"SELECT semaphore_inspect('p')\"))['in_use'])\n\
         q(\"SELECT semaphore_register('p', 3)\")\n\
         c.execute('BEGIN IMMEDIATE')\n\
         rolled = json.loads(q(\"SELECT semaphore_borrow('p', 60000)\"))['token']\n\
         c.execute('ROLLBACK')\n\
         then = json.loads(d.execute(\"SELECT semaphore_borrow('p', 60000)\").fetchone()[0])['token']\n\
         print('above' if then > rolled else f'token {rolled} granted again')\n",
    )
    .arg(&other)
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(lines[..2], ["2", "0"], "{said}");
    assert!(
        lines[2].contains("cannot run inside a statement that writes"),
        "{said}"
    );
    assert!(
        lines[3].contains("key"),
        "a key reused for another request: {said}"
    );
    assert!(
        lines[4].contains("temporary table semaphore_leases"),
        "{said}"
    );
    assert_eq!(lines[5], "2", "{said}");
    assert_eq!(
        lines[6], "above",
        "a token rolled back on one connection, granted through another"
    );
}

#[test]
fn an_interrupted_call_leaves_no_transaction_behind() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("interrupt.db");
    // A progress handler that interrupts after n steps, for every n up to
    // the length of a borrow: wherever the interrupt lands, the next call
    // finds the connection out of any transaction (or the error said to
    // roll back, where it came before the call marked its transaction),
    // and a borrow whose answer the interrupt lost is found again by its
    // key: one lease, never two.
    let out = python_on(
        &db,
        "q(\"SELECT semaphore_register('p', 100)\")\n\
         borrow = \"SELECT semaphore_borrow('p', 60000, NULL, NULL, ?)\"\n\
         for n in range(1, 400):\n\
         \x20   steps, limit = [0], [n]\n\
         \x20   def handler():\n\
         \x20       steps[0] += 1\n\
         \x20       return 1 if steps[0] >= limit[0] else 0\n\
         \x20   c.set_progress_handler(handler, 1)\n\
         \x20   try:\n\
         \x20       got = q(borrow, f'k{n}')\n\
         \x20   except sqlite3.Error as e:\n\
         \x20       got = None\n\
         \x20       if 'run ROLLBACK' in str(e):\n\
         \x20           c.set_progress_handler(None, 1)\n\
         \x20           c.execute('ROLLBACK')\n\
         \x20   # The next call interrupted too, early: its rollback of what the\n\
         \x20   # first left open may fail, and must then be tried again.\n\
         \x20   steps[0], limit[0] = 0, n % 7 + 1\n\
         \x20   c.set_progress_handler(handler, 1)\n\
         \x20   try:\n\
         \x20       q(\"SELECT semaphore_inspect('p')\")\n\
         \x20   except sqlite3.Error:\n\
         \x20       pass\n\
         \x20   c.set_progress_handler(None, 1)\n\
         \x20   # An answer lost to the interrupt: the key gets the lease again.\n\
         \x20   lease = json.loads(got or q(borrow, f'k{n}'))['lease']\n\
         \x20   assert not c.in_transaction, f'left in a transaction after {n} steps'\n\
         \x20   assert json.loads(q(\"SELECT semaphore_inspect('p')\"))['in_use'] == 1, n\n\
         \x20   assert q(\"SELECT semaphore_return('p', ?)\", lease) == 1\n\
         print('ok')\n",
    )
    .output()
    .unwrap();
    assert_eq!(said(&out), "ok\n");
}

#[test]
fn sqlites_busy_is_an_error_and_never_a_null() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("busy.db");
    // One Python process holds the write lock; another borrows with a
    // busy timeout of 50 ms: it must fail with SQLITE_BUSY, not answer
    // NULL ("no slot free") while slots are free.
    let mut locker = Talking::start(
        &db,
        "q('SELECT semaphore_register(?, 2)', sys.argv[3])\n\
         c.execute('BEGIN IMMEDIATE')\n\
         print('locked', flush=True)\n\
         sys.stdin.readline()\n\
         c.execute('ROLLBACK')\n",
    );
    assert_eq!(locker.line(), "locked");
    let out = python_on(
        &db,
        "c.execute('PRAGMA busy_timeout = 50')\n\
         try:\n\
         \x20   print('answered', q('SELECT semaphore_borrow(?, 60000)', sys.argv[3]))\n\
         except sqlite3.OperationalError as e:\n\
         \x20   print('error', e, e.sqlite_errorcode)\n",
    )
    .arg(POOL)
    .output()
    .unwrap();
    assert!(locker.end());
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.starts_with("error") && said.contains("locked"),
        "{said}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_whose_wal_was_deleted_under_it_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("wal.db");
    {
        // Closed before the files go: connections of one process share
        // them (SQLite's unix VFS), so a later one would find them gone too.
        let (_store, pool) = rust_store(&db).await;
        pool.register(1).await.unwrap();
    }
    // The -wal and -shm files deleted under an open connection: SQLite
    // goes on writing to the unlinked files, where no other process
    // looks, so a grant there could hand the slot out twice.
    let out = python_on(
        &db,
        "q(\"SELECT semaphore_inspect('shared-gpus')\")\n\
         c.execute('PRAGMA wal_checkpoint(TRUNCATE)')\n\
         os.remove(sys.argv[1] + '-wal')\n\
         os.remove(sys.argv[1] + '-shm')\n\
         try:\n\
         \x20   print('granted', q(\"SELECT semaphore_borrow('shared-gpus', 60000)\"))\n\
         except sqlite3.Error as e:\n\
         \x20   print('refused', e)\n",
    )
    .output()
    .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.starts_with("refused") && said.contains("-wal"),
        "{said}"
    );
    let (_store, again) = rust_store(&db).await;
    assert_eq!(again.inspect().await.unwrap().in_use, 0, "nothing granted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forked_childs_lease_ends_with_the_child() {
    let (_dir, db, pool) = file_with_pool("fork.db", 1).await;
    // The parent's holder is made before the fork (a borrow and a return),
    // as in a program that forks its workers (multiprocessing's `fork`):
    // the child's lease must be the child's, not the parent's, and end
    // when the child is killed while the parent lives.
    let mut parent = Talking::start(
        &db,
        "pool = sys.argv[3]\n\
         lease = json.loads(q('SELECT semaphore_borrow(?, 600000)', pool))\n\
         q('SELECT semaphore_return(?, ?)', pool, lease['lease'])\n\
         child = os.fork()\n\
         if child == 0:\n\
         \x20   d = sqlite3.connect(sys.argv[1], timeout=30, isolation_level=None)\n\
         \x20   d.enable_load_extension(True)\n\
         \x20   d.load_extension(sys.argv[2])\n\
         \x20   d.execute('SELECT semaphore_borrow(?, 600000)', (pool,)).fetchone()\n\
         \x20   print('child holds', flush=True)\n\
         \x20   time.sleep(600)\n\
         \x20   os._exit(0)\n\
         sys.stdin.readline()\n\
         os.kill(child, 9)\n\
         os.waitpid(child, 0)\n\
         print('child killed', flush=True)\n\
         sys.stdin.readline()\n",
    );
    assert_eq!(parent.line(), "child holds");
    assert_eq!(pool.inspect().await.unwrap().in_use, 1);
    parent.tell();
    assert_eq!(parent.line(), "child killed");
    let lease = pool
        .borrow(Duration::from_secs(30), Duration::ZERO)
        .await
        .expect("the killed child's slot, while its parent lives");
    assert_eq!(lease.lease().position, 0);
    assert!(parent.end());
}
