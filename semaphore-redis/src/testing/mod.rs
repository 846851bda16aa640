//! A Redis server for tests (feature `test-util`): the one that
//! `SEMAPHORE_REDIS_URL` names, or a throwaway `redis-server` started on
//! this machine; and a throwaway Redis Cluster ([`TestCluster`]).
//!
//! A throwaway server keeps nothing on disk and listens on a unix socket in
//! a temporary directory only, so it collides with no other server. It is
//! a [`Throwaway`] of the core's test skeleton: a watchdog stops it and
//! removes its directory once the test process is gone, however it ended.
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
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use semaphore_core::store::testing::{self as skeleton, Engine, Throwaway};

/// What to install when no server can be had.
const INSTALL: &str = "the Redis tests need redis-server (7.0 or later; on Debian or Ubuntu: \
    apt-get install redis-server) or a server named by SEMAPHORE_REDIS_URL";

/// A Redis server for tests.
#[derive(Debug)]
pub struct TestServer {
    url: String,
    owned: Option<Throwaway<Redis>>,
}

/// `redis-server`, keeping nothing on disk, on a unix socket in its
/// directory, with the caller's arguments last (so they win), kept for a
/// restart. Stopped by killing its process.
#[derive(Debug)]
struct Redis {
    args: Vec<String>,
}

impl Engine for Redis {
    const NAME: &'static str = "redis-server";
    const INSTALL: &'static str = INSTALL;
    const DIR_PREFIX: &'static str = "semaphore-redis-";
    const USER: Option<&'static str> = None;
    const LOG: &'static str = "redis.log";
    const READY_WITHIN: Duration = Duration::from_secs(30);

    fn program(&self) -> PathBuf {
        "redis-server".into()
    }

    fn args(&self, dir: &Path, command: &mut Command) {
        command
            .args(["--port", "0", "--save", "", "--appendonly", "no"])
            .arg("--unixsocket")
            .arg(socket(dir))
            .args(["--unixsocketperm", "700", "--dir"])
            .arg(dir)
            .args(&self.args);
    }

    /// Answers `PING` on the socket.
    fn ready(&self, dir: &Path) -> bool {
        send(&socket(dir), "PING").is_ok_and(|answer| answer.starts_with("+PONG"))
    }
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
        let named = |url| TestServer { url, owned: None };
        skeleton::shared(&SHARED, "SEMAPHORE_REDIS_URL", named, Self::start)
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
        let args = args.iter().map(|a| a.to_string()).collect();
        let server = Throwaway::start(Redis { args })?;
        Ok(TestServer {
            url: format!("redis+unix://{}", socket(server.dir()).display()),
            owned: Some(server),
        })
    }

    /// The server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A key prefix no other test uses, in this process or any other.
    pub fn fresh_prefix() -> String {
        skeleton::fresh_name()
    }

    /// Restarts a throwaway server, which loses everything (it keeps
    /// nothing on disk), and waits until it answers again.
    ///
    /// # Panics
    /// On a server named by `SEMAPHORE_REDIS_URL`, or if the restart fails.
    pub fn restart(&self) {
        self.owned("can be restarted")
            .restart()
            .unwrap_or_else(|e| panic!("restarting redis-server: {e}"));
    }

    /// Sends one command (space-separated words, no quoting) to the server
    /// and returns its raw RESP answer: for a test's `CONFIG SET`, `CLIENT
    /// KILL` or `CLIENT PAUSE`.
    ///
    /// # Panics
    /// On a server named by `SEMAPHORE_REDIS_URL`, or if it cannot be
    /// reached.
    pub fn command(&self, words: &str) -> String {
        send(&socket(self.owned("takes raw commands").dir()), words)
            .expect("a command to redis-server")
    }

    /// The throwaway server, for a call that only it can serve.
    ///
    /// # Panics
    /// On a server named by `SEMAPHORE_REDIS_URL`, saying that only a
    /// throwaway server `can` do that.
    fn owned(&self, can: &str) -> &Throwaway<Redis> {
        self.owned
            .as_ref()
            .unwrap_or_else(|| panic!("only a throwaway server {can}"))
    }
}

fn socket(dir: &Path) -> PathBuf {
    dir.join("redis.sock")
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
