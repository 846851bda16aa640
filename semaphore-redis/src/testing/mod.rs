//! A Redis server for tests (feature `test-util`): the one that
//! `SEMAPHORE_REDIS_URL` names, or a throwaway `redis-server` started on
//! this machine; and a throwaway Redis Cluster ([`TestCluster`]).
//!
//! A throwaway server keeps nothing on disk and listens on a unix socket in
//! a temporary directory only, so it collides with no other server. A
//! watchdog stops it and removes its directory once the test process is
//! gone, however it ended.
//!
//! With neither the binary nor a URL, [`TestServer::shared`] panics with the
//! install step: a test that needs Redis fails, it never skips.
//!
//! ```no_run
//! use semaphore_redis::testing::TestServer;
//!
//! let server = TestServer::shared();
//! let prefix = TestServer::fresh_prefix(); // one per test
//! println!("{} / {prefix}", server.url());
//! ```

mod cluster;

pub use cluster::TestCluster;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// What to install when no server can be had.
const INSTALL: &str = "the Redis tests need redis-server (7.0 or later; on Debian or Ubuntu: \
    apt-get install redis-server) or a server named by SEMAPHORE_REDIS_URL";

/// A Redis server for tests.
#[derive(Debug)]
pub struct TestServer {
    url: String,
    owned: Option<Owned>,
}

/// A throwaway server's directory and process.
#[derive(Debug)]
struct Owned {
    dir: tempfile::TempDir,
    /// `redis-server`'s arguments beyond the socket's and the directory's.
    args: Vec<String>,
    child: Mutex<Child>,
}

impl TestServer {
    /// The server this test process shares between its tests: the one
    /// `SEMAPHORE_REDIS_URL` names, or a throwaway one started on first
    /// use. Give each test its own prefix ([`fresh_prefix`](Self::fresh_prefix)).
    ///
    /// # Panics
    /// If neither a URL nor `redis-server` is there, or the server does not
    /// start, with a message that says what to install or what failed.
    pub fn shared() -> &'static TestServer {
        static SHARED: OnceLock<TestServer> = OnceLock::new();
        SHARED.get_or_init(|| match std::env::var("SEMAPHORE_REDIS_URL") {
            Ok(url) if !url.is_empty() => TestServer { url, owned: None },
            _ => Self::start().unwrap_or_else(|e| panic!("{e}")),
        })
    }

    /// A throwaway server of the caller's own, for a test that restarts it
    /// or changes its settings; stopped and removed when dropped.
    ///
    /// # Errors
    /// What to install, or what failed, in words.
    pub fn start() -> Result<TestServer, String> {
        Self::start_with(&[])
    }

    /// As [`start`](Self::start), with more `redis-server` arguments (for
    /// example `["--cluster-enabled", "yes"]`), kept for a restart.
    ///
    /// # Errors
    /// What to install, or what failed, in words.
    pub fn start_with(args: &[&str]) -> Result<TestServer, String> {
        let dir = tempfile::Builder::new()
            .prefix("semaphore-redis-")
            .tempdir()
            .map_err(|e| format!("a temporary directory for Redis: {e}"))?;
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let child = spawn(dir.path(), &args)?;
        watchdog(dir.path(), child.id())?;
        let url = format!("redis+unix://{}", socket(dir.path()).display());
        Ok(TestServer {
            url,
            owned: Some(Owned {
                dir,
                args,
                child: Mutex::new(child),
            }),
        })
    }

    /// The server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A key prefix no other test uses, in this process or any other.
    pub fn fresh_prefix() -> String {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        format!(
            "t{}_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        )
    }

    /// Restarts a throwaway server, which loses everything (it keeps
    /// nothing on disk), and waits until it answers again.
    ///
    /// # Panics
    /// On a server named by `SEMAPHORE_REDIS_URL`, or if the restart fails.
    pub fn restart(&self) {
        let owned = self
            .owned
            .as_ref()
            .expect("only a throwaway server can be restarted");
        let mut child = owned.child.lock().unwrap_or_else(|e| e.into_inner());
        let _ = child.kill();
        let _ = child.wait();
        *child = spawn(owned.dir.path(), &owned.args).expect("restarting redis-server");
        watchdog(owned.dir.path(), child.id()).expect("a watchdog for the restarted server");
    }

    /// Sends one command (space-separated words, no quoting) to the server
    /// and returns its raw RESP answer: for a test's `CONFIG SET`, `CLIENT
    /// KILL` or `CLIENT PAUSE`.
    ///
    /// # Panics
    /// On a server named by `SEMAPHORE_REDIS_URL`, or if it cannot be
    /// reached.
    pub fn command(&self, words: &str) -> String {
        let owned = self
            .owned
            .as_ref()
            .expect("only a throwaway server takes raw commands");
        send(&socket(owned.dir.path()), words).expect("a command to redis-server")
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(owned) = &self.owned {
            let mut child = owned.child.lock().unwrap_or_else(|e| e.into_inner());
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn socket(dir: &Path) -> PathBuf {
    dir.join("redis.sock")
}

/// Starts `redis-server` on the directory's socket, with `args` too, and
/// waits until it answers `PING`.
fn spawn(dir: &Path, args: &[String]) -> Result<Child, String> {
    let socket = socket(dir);
    let _ = std::fs::remove_file(&socket);
    let mut command = Command::new("redis-server");
    command
        .args(["--port", "0", "--save", "", "--appendonly", "no"])
        .arg("--unixsocket")
        .arg(&socket)
        .args(["--unixsocketperm", "700", "--dir"])
        .arg(dir)
        .arg("--logfile")
        .arg(dir.join("redis.log"))
        .args(args);
    started(command, &dir.join("redis.log"), || send(&socket, "PING"))
}

/// Starts `redis-server` as `command` says and waits up to 30 s until
/// `ping` answers `PONG`; an error that names `log` if it exits first.
fn started(
    mut command: Command,
    log: &Path,
    ping: impl Fn() -> std::io::Result<String>,
) -> Result<Child, String> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => INSTALL.to_string(),
            _ => format!("starting redis-server: {e}"),
        })?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if ping().is_ok_and(|answer| answer.starts_with("+PONG")) {
            return Ok(child);
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "redis-server exited ({status}); see {}",
                log.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    Err(format!(
        "redis-server did not answer within 30 s; see {}",
        log.display()
    ))
}

/// One inline command over the socket; the first reply's bytes as read.
fn send(socket: &Path, words: &str) -> std::io::Result<String> {
    let stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    ask(stream, words)
}

/// One inline command on `stream`; the first reply's bytes as read.
fn ask(mut stream: impl Read + Write, words: &str) -> std::io::Result<String> {
    stream.write_all(format!("{words}\r\n").as_bytes())?;
    let mut buf = [0u8; 4096];
    let n = stream.read(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// Starts a shell that stops the server and removes its directory once
/// this process is gone.
fn watchdog(dir: &Path, server: u32) -> Result<(), String> {
    let script = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 1; done; kill -9 {server}; rm -rf '{dir}'",
        pid = std::process::id(),
        dir = dir.display(),
    );
    Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(drop)
        .map_err(|e| format!("starting the watchdog of redis-server: {e}"))
}
