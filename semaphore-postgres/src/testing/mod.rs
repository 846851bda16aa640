//! A PostgreSQL server for tests (feature `test-util`): the one that
//! `SEMAPHORE_PG_URL` names, or a throwaway one started from the
//! PostgreSQL binaries on this machine.
//!
//! A throwaway server lives in a temporary directory and listens on a unix
//! socket there only, so it collides with no other server. Its data
//! directory is made with `initdb`, the server is `postgres` itself, and
//! `pg_ctl` stops it; all from `PATH`, or else from the newest
//! `/usr/lib/postgresql/*/bin`. As root (which PostgreSQL refuses), they
//! run as the `postgres` user through `runuser`. It is a [`Throwaway`] of
//! the core's test skeleton: a watchdog stops the server and removes its
//! directory once the test process is gone, however it ended.
//!
//! With neither binaries nor a URL, [`TestServer::shared`] panics with the
//! install step: a test that needs PostgreSQL fails, it never skips.
//!
//! ```no_run
//! use semaphore_postgres::testing::TestServer;
//!
//! let server = TestServer::shared();
//! let schema = TestServer::fresh_schema(); // one per test
//! println!("{} / {schema}", server.url());
//! ```

mod bouncer;

pub use bouncer::TestBouncer;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use semaphore_core::store::testing::{self as skeleton, Engine, Stop, Throwaway};

/// What to install when no server can be had.
const INSTALL: &str = "the PostgreSQL tests need PostgreSQL's server binaries (initdb, pg_ctl, \
    postgres; on Debian or Ubuntu: apt-get install postgresql) or a server named by \
    SEMAPHORE_PG_URL (a connection string whose user may create schemas)";

/// The unix user PostgreSQL's programs run as when this process is root.
const USER: &str = "postgres";

/// A PostgreSQL server for tests.
#[derive(Debug)]
pub struct TestServer {
    url: String,
    owned: Option<Throwaway<Postgres>>,
}

/// `postgres` on a data directory that `initdb` made, listening on a unix
/// socket in its directory only; stopped with `pg_ctl`.
#[derive(Debug)]
struct Postgres {
    /// The directory holding `initdb`, `postgres` and `pg_ctl`.
    bin: PathBuf,
    /// The default durability (`fsync`, `synchronous_commit`), as a real
    /// deployment runs; else both off, for fast tests.
    durable: bool,
}

impl Engine for Postgres {
    const NAME: &'static str = "postgres";
    const INSTALL: &'static str = INSTALL;
    const DIR_PREFIX: &'static str = "semaphore-pg-";
    const USER: Option<&'static str> = Some(USER);
    const LOG: &'static str = "server.log";
    const READY_WITHIN: Duration = Duration::from_secs(60);

    /// `initdb`, its output in `initdb.log`.
    fn prepare(&self, dir: &Path) -> Result<(), String> {
        let log = dir.join("initdb.log");
        let out = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        skeleton::run(
            skeleton::command_as(Some(USER), self.bin.join("initdb"))
                .arg("-D")
                .arg(data(dir))
                .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"])
                .args(["--no-locale", "--no-instructions"])
                .stdout(out),
            INSTALL,
        )
        .map_err(|e| format!("{e}; see {}", log.display()))
    }

    fn program(&self) -> PathBuf {
        self.bin.join("postgres")
    }

    fn args(&self, dir: &Path, command: &mut Command) {
        command.arg("-D").arg(data(dir)).arg("-k").arg(dir);
        command.args(["-c", "listen_addresses=", "-c", "max_connections=400"]);
        if !self.durable {
            command.args(["-c", "fsync=off", "-c", "synchronous_commit=off"]);
            command.args(["-c", "full_page_writes=off"]);
        }
    }

    /// The postmaster says `ready` in its pid file (its eighth line), as
    /// `pg_ctl -w` waits for.
    fn ready(&self, dir: &Path) -> bool {
        std::fs::read_to_string(data(dir).join("postmaster.pid"))
            .is_ok_and(|pid| pid.lines().nth(7).is_some_and(|s| s.trim() == "ready"))
    }

    /// `pg_ctl stop`: fast (every connection is cut, the data is kept) to
    /// restart, immediate for good.
    fn stop(&self, dir: &Path, how: Stop) -> Option<String> {
        let mode = match how {
            Stop::ToRestart => "fast",
            Stop::ForGood => "immediate",
        };
        Some(format!(
            "'{pg_ctl}' -D '{data}' -m {mode} -w -t 60 stop >/dev/null",
            pg_ctl = self.bin.join("pg_ctl").display(),
            data = data(dir).display(),
        ))
    }
}

fn data(dir: &Path) -> PathBuf {
    dir.join("data")
}

impl TestServer {
    /// The server this test process shares between its tests: the one
    /// `SEMAPHORE_PG_URL` names, or a throwaway one started on first use.
    /// Give each test its own schema ([`fresh_schema`](Self::fresh_schema)).
    ///
    /// # Panics
    /// If neither a URL nor the binaries are there, or the server does not
    /// start, with a message that says what to install or what failed.
    pub fn shared() -> &'static TestServer {
        static SHARED: OnceLock<TestServer> = OnceLock::new();
        let named = |url| TestServer { url, owned: None };
        skeleton::shared(&SHARED, "SEMAPHORE_PG_URL", named, Self::start)
    }

    /// A throwaway server of the caller's own, for a test that stops or
    /// restarts it; stopped and removed when dropped.
    ///
    /// # Errors
    /// What to install, or what failed, in words.
    pub fn start() -> Result<TestServer, String> {
        Self::start_with(false)
    }

    /// As [`start`](Self::start), with PostgreSQL's default durability
    /// (`fsync`, `synchronous_commit` and `full_page_writes` on), as a
    /// deployment runs it: for benchmarks whose anchor is a commit.
    ///
    /// # Errors
    /// What to install, or what failed, in words.
    pub fn start_durable() -> Result<TestServer, String> {
        Self::start_with(true)
    }

    fn start_with(durable: bool) -> Result<TestServer, String> {
        let bin = binaries().ok_or_else(|| INSTALL.to_string())?;
        let server = Throwaway::start(Postgres { bin, durable })?;
        Ok(TestServer {
            url: format!(
                "host={} user=postgres dbname=postgres",
                server.dir().display()
            ),
            owned: Some(server),
        })
    }

    /// The connection string (key=value form).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A schema name no other test uses, in this process or any other.
    pub fn fresh_schema() -> String {
        skeleton::fresh_name()
    }

    /// Restarts a throwaway server (fast shutdown: every connection is
    /// cut), and waits until it accepts connections again.
    ///
    /// # Panics
    /// On a server named by `SEMAPHORE_PG_URL`, or if the restart fails.
    pub fn restart(&self) {
        self.owned
            .as_ref()
            .expect("only a throwaway server can be restarted")
            .restart()
            .unwrap_or_else(|e| panic!("restarting PostgreSQL: {e}"));
    }
}

/// The directory holding `initdb`, `postgres` and `pg_ctl`: that of the
/// `initdb` on `PATH` (symlinks resolved, as `pg_ctl` finds `postgres`),
/// or the newest `/usr/lib/postgresql/*/bin`.
fn binaries() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .and_then(|path| std::env::split_paths(&path).find(|dir| dir.join("initdb").is_file()))
        .and_then(|dir| {
            Some(
                dir.join("initdb")
                    .canonicalize()
                    .ok()?
                    .parent()?
                    .to_path_buf(),
            )
        });
    on_path.or_else(|| {
        let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|e| {
                let e = e.ok()?;
                let version = e.file_name().to_str()?.parse().ok()?;
                let bin = e.path().join("bin");
                bin.join("initdb").is_file().then_some((version, bin))
            })
            .collect();
        versions.sort();
        versions.pop().map(|(_, bin)| bin)
    })
}
