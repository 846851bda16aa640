//! A PostgreSQL server for tests (feature `test-util`): the one that
//! `SEMAPHORE_PG_URL` names, or a throwaway one started from the
//! PostgreSQL binaries on this machine.
//!
//! A throwaway server lives in a temporary directory and listens on a unix
//! socket there only, so it collides with no other server. It is started
//! with `initdb` and `pg_ctl` from `PATH`, or else from the newest
//! `/usr/lib/postgresql/*/bin`; as root (which PostgreSQL refuses), they run
//! as the `postgres` user through `runuser`. A watchdog stops the server and
//! removes its directory once the test process is gone, however it ended.
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
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// What to install when no server can be had.
const INSTALL: &str = "the PostgreSQL tests need PostgreSQL's server binaries (initdb, pg_ctl, \
    postgres; on Debian or Ubuntu: apt-get install postgresql) or a server named by \
    SEMAPHORE_PG_URL (a connection string whose user may create schemas)";

/// A PostgreSQL server for tests.
#[derive(Debug)]
pub struct TestServer {
    url: String,
    owned: Option<Owned>,
}

/// A throwaway server's directory and how to run its binaries.
#[derive(Debug)]
struct Owned {
    dir: tempfile::TempDir,
    bin: PathBuf,
    as_postgres: bool,
    /// The default durability (`fsync`, `synchronous_commit`), as a real
    /// deployment runs; else both off, for fast tests.
    durable: bool,
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
        SHARED.get_or_init(|| match std::env::var("SEMAPHORE_PG_URL") {
            Ok(url) if !url.is_empty() => TestServer { url, owned: None },
            _ => Self::start().unwrap_or_else(|e| panic!("{e}")),
        })
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
        let as_postgres = is_root();
        let dir = tempfile::Builder::new()
            .prefix("semaphore-pg-")
            .tempdir()
            .map_err(|e| format!("a temporary directory for PostgreSQL: {e}"))?;
        let owned = Owned {
            dir,
            bin,
            as_postgres,
            durable,
        };
        if as_postgres {
            run(Command::new("chown").arg("postgres:").arg(owned.dir.path()))?;
        }
        let data = owned.data();
        let log = owned.dir.path().join("initdb.log");
        run(owned
            .command("initdb")
            .arg("-D")
            .arg(&data)
            .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"])
            .args(["--no-locale", "--no-instructions"])
            .stdout(log_file(&log)?))
        .map_err(|e| format!("{e}; see {}", log.display()))?;
        owned.watchdog()?;
        owned.pg_ctl("start")?;
        let url = format!(
            "host={} user=postgres dbname=postgres",
            owned.dir.path().display()
        );
        Ok(TestServer {
            url,
            owned: Some(owned),
        })
    }

    /// The connection string (key=value form).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A schema name no other test uses, in this process or any other.
    pub fn fresh_schema() -> String {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        format!(
            "t{}_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            uuid::Uuid::new_v4()
                .simple()
                .to_string()
                .get(..8)
                .unwrap_or("x")
        )
    }

    /// Restarts a throwaway server (fast shutdown: every connection is
    /// cut), and waits until it accepts connections again.
    ///
    /// # Panics
    /// On a server named by `SEMAPHORE_PG_URL`, or if the restart fails.
    pub fn restart(&self) {
        let owned = self
            .owned
            .as_ref()
            .expect("only a throwaway server can be restarted");
        owned.pg_ctl("restart").expect("restarting PostgreSQL");
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(owned) = &self.owned {
            let _ = owned.pg_ctl_mode("stop", "immediate");
        }
    }
}

impl Owned {
    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// `tool` from the binaries' directory, as the `postgres` user if need
    /// be.
    fn command(&self, tool: &str) -> Command {
        let path = self.bin.join(tool);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        }
    }

    fn pg_ctl(&self, action: &str) -> Result<(), String> {
        self.pg_ctl_mode(action, "fast")
    }

    fn pg_ctl_mode(&self, action: &str, mode: &str) -> Result<(), String> {
        let durability = if self.durable {
            ""
        } else {
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        };
        let options = format!(
            "-k {} -c listen_addresses= {durability} -c max_connections=400",
            self.dir.path().display()
        );
        let log = self.dir.path().join("server.log");
        run(self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-l"])
            .arg(&log)
            .args(["-m", mode, "-w", "-t", "60", "-o", &options, action])
            .stdout(Stdio::null()))
        .map_err(|e| format!("pg_ctl {action}: {e}; see {}", log.display()))
    }

    /// Starts a shell that stops the server and removes its directory once
    /// this process is gone.
    fn watchdog(&self) -> Result<(), String> {
        let runas = if self.as_postgres {
            "runuser -u postgres -- "
        } else {
            ""
        };
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; \
             {runas}'{pg_ctl}' -D '{data}' -m immediate stop; rm -rf '{dir}'",
            pid = std::process::id(),
            pg_ctl = self.bin.join("pg_ctl").display(),
            data = self.data().display(),
            dir = self.dir.path().display(),
        );
        watchdog(&script, "the server")
    }
}

/// Starts `sh -c script` in the background, detached from the test's
/// standard streams: the clean-up that runs once the test process is gone.
fn watchdog(script: &str, of: &str) -> Result<(), String> {
    Command::new("sh")
        .args(["-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(drop)
        .map_err(|e| format!("starting the watchdog of {of}: {e}"))
}

fn log_file(path: &Path) -> Result<std::fs::File, String> {
    std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn run(command: &mut Command) -> Result<(), String> {
    let output = command
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("{command:?}: {e}"))?;
    if output.status.success() {
        return Ok(());
    }
    Err(format!(
        "{command:?} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    ))
}

/// The directory holding `initdb` and `pg_ctl`: on `PATH`, or the newest
/// `/usr/lib/postgresql/*/bin`.
fn binaries() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .and_then(|path| std::env::split_paths(&path).find(|dir| dir.join("initdb").is_file()));
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

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}
