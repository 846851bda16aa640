//! What the loadable extension's tests share: the extension file, built
//! once per test binary from `semaphore-sqlite-ext` (its own workspace),
//! Debian's `python3` to load it, Python processes talked to a line at a
//! time, and files with a pool registered through a Rust store handle.
// Each test binary uses its own part of this module.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Lines, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use semaphore_sqlite::{Pool, PoolId, SqliteStore};

pub(crate) const POOL: &str = "shared-gpus";

/// The extension file, built once per run from `semaphore-sqlite-ext`
/// (its own workspace) into `target/ext`.
pub(crate) fn extension() -> &'static Path {
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
pub(crate) fn python() -> &'static str {
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
pub(crate) fn python_on(db: &Path, body: &str) -> Command {
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
pub(crate) struct Talking {
    pub(crate) child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Talking {
    pub(crate) fn start(db: &Path, body: &str) -> Self {
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
    pub(crate) fn line(&mut self) -> String {
        self.lines.next().unwrap().unwrap()
    }

    /// Lets it read a line.
    pub(crate) fn tell(&mut self) {
        writeln!(self.child.stdin.as_mut().unwrap()).unwrap();
    }

    /// Closes its stdin and waits for it to end; whether it succeeded.
    pub(crate) fn end(mut self) -> bool {
        drop(self.child.stdin.take());
        self.child.wait().unwrap().success()
    }
}

/// What a process that must have succeeded printed.
pub(crate) fn said(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub(crate) fn unix_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// A new file in a directory of its own, with the pool registered with
/// `count` slots through a Rust store handle (which the pool keeps).
pub(crate) async fn file_with_pool(name: &str, count: u32) -> (tempfile::TempDir, PathBuf, Pool) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join(name);
    let (_store, pool) = rust_store(&db).await;
    pool.register(count).await.unwrap();
    (dir, db, pool)
}

pub(crate) async fn rust_store(db: &Path) -> (Arc<SqliteStore>, Pool) {
    let store = Arc::new(SqliteStore::open(db).expect("opening the file"));
    let pool = Pool::new(store.clone(), PoolId::from_name(POOL));
    (store, pool)
}
