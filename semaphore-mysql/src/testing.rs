//! A MariaDB or MySQL server for tests (feature `test-util`): the one that
//! `SEMAPHORE_MYSQL_URL` names, or a throwaway `mariadbd` started on this
//! machine.
//!
//! A throwaway server gets a fresh data directory (`mariadb-install-db`)
//! and listens on a unix socket in it only, so it collides with no other
//! server; as root it runs as the `mysql` user, since `mariadbd` refuses
//! root. It is a [`Throwaway`] of the core's test skeleton: a watchdog
//! stops it and removes its directory once the test process is gone,
//! however it ended. Each test takes its own table prefix
//! ([`TestServer::fresh_prefix`]) in the database `semaphore_test`.
//!
//! With neither the binaries nor a URL, [`TestServer::shared`] panics with
//! the install step: a test that needs MySQL fails, it never skips.
//!
//! ```no_run
//! use semaphore_mysql::testing::TestServer;
//!
//! let server = TestServer::shared();
//! let prefix = TestServer::fresh_prefix(); // one per test
//! println!("{} / {prefix}", server.url());
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use semaphore_core::store::testing::{self as skeleton, Engine, Stop, Throwaway};

/// What to install when no server can be had.
const INSTALL: &str = "the MySQL store's tests need MariaDB's server (mariadb-install-db and \
    mariadbd; on Debian or Ubuntu: apt-get install mariadb-server) or a server named by \
    SEMAPHORE_MYSQL_URL (mysql://user:password@host:port/database)";

/// The database the throwaway server's tests use.
const DATABASE: &str = "semaphore_test";

/// The unix user MariaDB's programs run as when this process is root.
const USER: &str = "mysql";

/// A MySQL or MariaDB server for tests.
#[derive(Debug)]
pub struct TestServer {
    url: String,
    owned: Option<Throwaway<Mariadb>>,
}

/// `mariadbd` on a data directory that `mariadb-install-db` made, without
/// networking, on a unix socket in its directory; stopped by its pid file
/// (as root the spawned process is `runuser`, not the server).
#[derive(Debug)]
struct Mariadb;

impl Engine for Mariadb {
    const NAME: &'static str = "mariadbd";
    const INSTALL: &'static str = INSTALL;
    const DIR_PREFIX: &'static str = "semaphore-mysql-";
    const USER: Option<&'static str> = Some(USER);
    const LOG: &'static str = "mysqld.log";
    const READY_WITHIN: Duration = Duration::from_secs(60);
    const POLL: Duration = Duration::from_millis(50);

    /// A temporary directory of the server's own, then
    /// `mariadb-install-db`, one at a time in this process: two bootstraps
    /// sharing /tmp at once were seen to trip over each other's temporary
    /// tables.
    fn prepare(&self, dir: &Path) -> Result<(), String> {
        skeleton::run(
            skeleton::command_as(Some(USER), "mkdir").arg(tmp(dir)),
            "mkdir (coreutils)",
        )
        .map_err(|e| format!("a temporary directory for MariaDB: {e}"))?;
        static BOOTSTRAP: Mutex<()> = Mutex::new(());
        let _one = BOOTSTRAP.lock().unwrap_or_else(|e| e.into_inner());
        skeleton::run(
            skeleton::command_as(Some(USER), "mariadb-install-db")
                .args([
                    "--no-defaults",
                    "--auth-root-authentication-method=normal",
                    "--skip-test-db",
                ])
                .arg(format!("--datadir={}", data(dir).display()))
                .arg(format!("--tmpdir={}", tmp(dir).display())),
            INSTALL,
        )
    }

    fn program(&self) -> PathBuf {
        "mariadbd".into()
    }

    fn args(&self, dir: &Path, command: &mut Command) {
        command
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data(dir).display()))
            .arg(format!("--socket={}", socket(dir).display()))
            .arg(format!("--tmpdir={}", tmp(dir).display()))
            .arg(format!("--pid-file={}", pid_file(dir).display()))
            .args([
                "--skip-networking",
                "--innodb-buffer-pool-size=64M",
                "--max-connections=1000",
            ]);
    }

    /// Answers as root on the socket, and has the tests' database (made
    /// here if need be).
    fn ready(&self, dir: &Path) -> bool {
        Command::new("mariadb")
            .arg(format!("--socket={}", socket(dir).display()))
            .args(["-uroot", "-e"])
            .arg(format!("CREATE DATABASE IF NOT EXISTS {DATABASE}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// `SIGKILL` to the pid in the pid file, which is then removed, along
    /// with the socket. For good, also any `mariadbd` left on this data
    /// directory (the pid file may be gone or not yet written); the `[m]`
    /// keeps the pattern from matching the shell that runs it.
    fn stop(&self, dir: &Path, how: Stop) -> Option<String> {
        let pid_file = pid_file(dir);
        let mut script = format!(
            "kill -9 $(cat '{pid}') 2>/dev/null; rm -f '{pid}' '{socket}'",
            pid = pid_file.display(),
            socket = socket(dir).display(),
        );
        if how == Stop::ForGood {
            script.push_str(&format!(
                "; pkill -9 -f '[m]ariadbd --no-defaults --datadir={}'",
                data(dir).display()
            ));
        }
        Some(script + "; true")
    }
}

impl TestServer {
    /// The server this test process shares between its tests: the one
    /// `SEMAPHORE_MYSQL_URL` names, or a throwaway one started on first
    /// use. Give each test its own prefix ([`fresh_prefix`](Self::fresh_prefix)).
    ///
    /// # Panics
    /// If neither a URL nor the server's binaries are there, or the server
    /// does not start, with a message that says what to install or what
    /// failed.
    pub fn shared() -> &'static TestServer {
        static SHARED: OnceLock<TestServer> = OnceLock::new();
        let named = |url| TestServer { url, owned: None };
        skeleton::shared(&SHARED, "SEMAPHORE_MYSQL_URL", named, Self::start)
    }

    /// A throwaway server of the caller's own, for a test that restarts or
    /// stops it; stopped and removed when dropped.
    ///
    /// # Errors
    /// What to install, or what failed, in words.
    pub fn start() -> Result<TestServer, String> {
        let server = Throwaway::start(Mariadb)?;
        Ok(TestServer {
            url: format!(
                "mysql://root@localhost/{DATABASE}?socket={}",
                socket(server.dir()).display()
            ),
            owned: Some(server),
        })
    }

    /// The server's URL, database `semaphore_test` (or the URL's own).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A table prefix no other test uses, in this process or any other.
    pub fn fresh_prefix() -> String {
        skeleton::fresh_name()
    }

    /// Restarts a throwaway server (its data survives) and waits until it
    /// answers again.
    ///
    /// # Panics
    /// On a server named by `SEMAPHORE_MYSQL_URL`, or if the restart fails.
    pub fn restart(&self) {
        self.owned
            .as_ref()
            .expect("only a throwaway server can be restarted")
            .restart()
            .unwrap_or_else(|e| panic!("restarting mariadbd: {e}"));
    }

    /// Runs `statement` as root on a throwaway server with the `mariadb`
    /// client, and returns what it printed (tab-separated, no headers):
    /// for a test's `KILL` or a look at `PROCESSLIST`.
    ///
    /// # Panics
    /// On a server named by `SEMAPHORE_MYSQL_URL`, or if the statement
    /// fails.
    pub fn sql(&self, statement: &str) -> String {
        self.try_sql(statement)
            .unwrap_or_else(|e| panic!("{statement}: {e}"))
    }

    /// [`sql`](Self::sql), with the server's refusal as an error (what the
    /// client printed): for a `KILL` of a connection that may have ended.
    ///
    /// # Errors
    /// If the server refused the statement.
    ///
    /// # Panics
    /// On a server named by `SEMAPHORE_MYSQL_URL`, or without the client.
    pub fn try_sql(&self, statement: &str) -> Result<String, String> {
        let owned = self
            .owned
            .as_ref()
            .expect("only a throwaway server takes raw statements");
        let out = Command::new("mariadb")
            .arg(format!("--socket={}", socket(owned.dir()).display()))
            .args(["-uroot", "-N", "-B", "-e", statement])
            .output()
            .expect("running the mariadb client");
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }
}

fn data(dir: &Path) -> PathBuf {
    dir.join("data")
}

fn tmp(dir: &Path) -> PathBuf {
    dir.join("tmp")
}

fn socket(dir: &Path) -> PathBuf {
    dir.join("mysqld.sock")
}

fn pid_file(dir: &Path) -> PathBuf {
    dir.join("mysqld.pid")
}
