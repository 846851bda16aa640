//! A MariaDB or MySQL server for tests (feature `test-util`): the one that
//! `SEMAPHORE_MYSQL_URL` names, or a throwaway `mariadbd` started on this
//! machine.
//!
//! A throwaway server gets a fresh data directory (`mariadb-install-db`)
//! and listens on a unix socket in it only, so it collides with no other
//! server; as root it runs as the `mysql` user, since `mariadbd` refuses
//! root. A watchdog stops it and removes its directory once the test
//! process is gone, however it ended. Each test takes its own table prefix
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
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// What to install when no server can be had.
const INSTALL: &str = "the MySQL store's tests need MariaDB's server (mariadb-install-db and \
    mariadbd; on Debian or Ubuntu: apt-get install mariadb-server) or a server named by \
    SEMAPHORE_MYSQL_URL (mysql://user:password@host:port/database)";

/// The database the throwaway server's tests use.
const DATABASE: &str = "semaphore_test";

/// A MySQL or MariaDB server for tests.
#[derive(Debug)]
pub struct TestServer {
    url: String,
    owned: Option<Owned>,
}

/// A throwaway server's directory and process.
#[derive(Debug)]
struct Owned {
    dir: tempfile::TempDir,
    child: Mutex<Child>,
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
        SHARED.get_or_init(|| match std::env::var("SEMAPHORE_MYSQL_URL") {
            Ok(url) if !url.is_empty() => TestServer { url, owned: None },
            _ => Self::start().unwrap_or_else(|e| panic!("{e}")),
        })
    }

    /// A throwaway server of the caller's own, for a test that restarts or
    /// stops it; stopped and removed when dropped.
    ///
    /// # Errors
    /// What to install, or what failed, in words.
    pub fn start() -> Result<TestServer, String> {
        let dir = tempfile::Builder::new()
            .prefix("semaphore-mysql-")
            .tempdir()
            .map_err(|e| format!("a temporary directory for MariaDB: {e}"))?;
        let as_root = is_root();
        // Each server its own temporary directory: two bootstraps sharing
        // /tmp at once were seen to trip over each other's temporary tables.
        std::fs::create_dir(tmp(dir.path()))
            .map_err(|e| format!("a temporary directory for MariaDB: {e}"))?;
        if as_root {
            run(Command::new("chown").args(["-R", "mysql:"]).arg(dir.path()))?;
        }
        // One bootstrap at a time in this process, for the same reason.
        static BOOTSTRAP: Mutex<()> = Mutex::new(());
        let _one = BOOTSTRAP.lock().unwrap_or_else(|e| e.into_inner());
        let mut install = user_command("mariadb-install-db", as_root);
        install
            .args([
                "--no-defaults",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ])
            .arg(format!("--datadir={}", data(dir.path()).display()))
            .arg(format!("--tmpdir={}", tmp(dir.path()).display()));
        run(&mut install)?;
        let child = spawn(dir.path(), as_root)?;
        watchdog(dir.path(), child.id())?;
        let socket = socket(dir.path());
        let server = TestServer {
            url: format!(
                "mysql://root@localhost/{DATABASE}?socket={}",
                socket.display()
            ),
            owned: Some(Owned {
                dir,
                child: Mutex::new(child),
            }),
        };
        Ok(server)
    }

    /// The server's URL, database `semaphore_test` (or the URL's own).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A table prefix no other test uses, in this process or any other.
    pub fn fresh_prefix() -> String {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        format!(
            "t{}_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        )
    }

    /// Restarts a throwaway server (its data survives) and waits until it
    /// answers again.
    ///
    /// # Panics
    /// On a server named by `SEMAPHORE_MYSQL_URL`, or if the restart fails.
    pub fn restart(&self) {
        let owned = self
            .owned
            .as_ref()
            .expect("only a throwaway server can be restarted");
        let mut child = owned.child.lock().unwrap_or_else(|e| e.into_inner());
        stop(owned.dir.path(), &mut child);
        *child = spawn(owned.dir.path(), is_root()).expect("restarting mariadbd");
        watchdog(owned.dir.path(), child.id()).expect("a watchdog for the restarted server");
    }
}

impl TestServer {
    /// Runs `statement` as root on a throwaway server with the `mariadb`
    /// client, and returns what it printed (tab-separated, no headers):
    /// for a test's `KILL` or a look at `PROCESSLIST`.
    ///
    /// # Panics
    /// On a server named by `SEMAPHORE_MYSQL_URL`, or if the statement
    /// fails.
    pub fn sql(&self, statement: &str) -> String {
        let owned = self
            .owned
            .as_ref()
            .expect("only a throwaway server takes raw statements");
        let out = Command::new("mariadb")
            .arg(format!("--socket={}", socket(owned.dir.path()).display()))
            .args(["-uroot", "-N", "-B", "-e", statement])
            .output()
            .expect("running the mariadb client");
        assert!(
            out.status.success(),
            "{statement}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(owned) = &self.owned {
            let mut child = owned.child.lock().unwrap_or_else(|e| e.into_inner());
            stop(owned.dir.path(), &mut child);
        }
    }
}

/// Kills the server (by its pid file: under `runuser` the child is not
/// the server) and reaps the child.
fn stop(dir: &Path, child: &mut Child) {
    if let Ok(pid) = std::fs::read_to_string(dir.join("mysqld.pid")) {
        let _ = Command::new("kill").args(["-9", pid.trim()]).status();
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_file(dir.join("mysqld.pid"));
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.trim_ascii() == b"0")
}

/// `program`, run as the `mysql` user when this process is root.
fn user_command(program: &str, as_root: bool) -> Command {
    if as_root {
        let mut c = Command::new("runuser");
        c.args(["-u", "mysql", "--", program]);
        c
    } else {
        Command::new(program)
    }
}

fn run(command: &mut Command) -> Result<(), String> {
    let out = command.output().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => INSTALL.to_string(),
        _ => format!("running {command:?}: {e}"),
    })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{command:?} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
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

/// Starts `mariadbd` on the directory's socket, without networking, and
/// waits until it answers; creates the tests' database.
fn spawn(dir: &Path, as_root: bool) -> Result<Child, String> {
    let socket = socket(dir);
    let _ = std::fs::remove_file(&socket);
    let mut child = user_command("mariadbd", as_root)
        .arg("--no-defaults")
        .arg(format!("--datadir={}", data(dir).display()))
        .arg(format!("--socket={}", socket.display()))
        .arg(format!("--tmpdir={}", tmp(dir).display()))
        .arg(format!("--pid-file={}", dir.join("mysqld.pid").display()))
        .arg(format!("--log-error={}", dir.join("mysqld.log").display()))
        .args([
            "--skip-networking",
            "--innodb-buffer-pool-size=64M",
            "--max-connections=1000",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => INSTALL.to_string(),
            _ => format!("starting mariadbd: {e}"),
        })?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let created = Command::new("mariadb")
            .arg(format!("--socket={}", socket.display()))
            .args(["-uroot", "-e"])
            .arg(format!("CREATE DATABASE IF NOT EXISTS {DATABASE}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if created.is_ok_and(|s| s.success()) {
            return Ok(child);
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "mariadbd exited ({status}); see {}",
                dir.join("mysqld.log").display()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    Err("mariadbd did not answer within 60 s".into())
}

/// Starts a shell that stops the server and removes its directory once
/// this process is gone.
fn watchdog(dir: &Path, server: u32) -> Result<(), String> {
    let script = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 1; done; kill -9 {server}; \
         pkill -9 -f 'mariadbd --no-defaults --datadir={data}'; rm -rf '{dir}'",
        pid = std::process::id(),
        data = data(dir).display(),
        dir = dir.display(),
    );
    Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(drop)
        .map_err(|e| format!("starting the watchdog of mariadbd: {e}"))
}
