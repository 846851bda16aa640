//! Throwaway database servers for a store's tests (feature `test-util`):
//! the one skeleton that the PostgreSQL, Redis and MySQL stores' `testing`
//! modules fill in.
//!
//! A [`Throwaway`] server gets a temporary directory of its own (given to
//! the engine's unix user when this process is root, since `initdb`,
//! `postgres` and `mariadbd` refuse root), is prepared once, is spawned
//! with its standard output and error appended to a log file in that
//! directory, and is probed until it answers. A watchdog shell stops it
//! and removes the directory once the test process is gone, however it
//! ended; dropping the [`Throwaway`] stops it at once.
//!
//! An [`Engine`] says only what differs: its program and arguments, an
//! optional one-time preparation, its readiness probe, and how it stops
//! beyond the killing of the spawned process.
//!
//! The free functions are the other pieces every store's harness shares:
//! the server a test process shares, or the one an environment variable
//! names instead ([`shared`]); names no other test uses ([`fresh_name`]);
//! running a tool as the engine's user ([`command_as`], [`run`]).

use std::ffi::OsStr;
use std::fmt;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// How long a stop script may take to end the server before the spawned
/// process is killed regardless.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// A kind of server a test starts: what differs between PostgreSQL,
/// MariaDB, Redis and PgBouncer. The skeleton ([`Throwaway`]) does the
/// rest.
///
/// Every method gets the server's own directory, `dir`, which exists and
/// belongs to [`USER`](Self::USER) (when this process is root) by then.
pub trait Engine: fmt::Debug + Send + Sync {
    /// The server's program name, for messages (`"mariadbd"`).
    const NAME: &'static str;
    /// What to install, in words: the error when a program is missing.
    const INSTALL: &'static str;
    /// The start of the temporary directory's name (`"semaphore-redis-"`).
    const DIR_PREFIX: &'static str;
    /// The unix user to run the server and its tools as when this process
    /// is root; `None` runs them as this process's user.
    const USER: Option<&'static str>;
    /// The log file's name in the directory: the server's standard output
    /// and error, appended, start after start; named in errors.
    const LOG: &'static str;
    /// How long the server may take to answer [`ready`](Self::ready)
    /// after it is spawned.
    const READY_WITHIN: Duration;
    /// How long to sleep between two readiness probes.
    const POLL: Duration = Duration::from_millis(20);

    /// Done once, before the first spawn (a data directory's bootstrap, a
    /// configuration file). Nothing by default.
    ///
    /// # Errors
    /// What to install, or what failed, in words.
    fn prepare(&self, dir: &Path) -> Result<(), String> {
        let _ = dir;
        Ok(())
    }

    /// The program to spawn: a name looked up on `PATH`, or a path.
    fn program(&self) -> PathBuf;

    /// Adds the program's arguments to `command` (already the program, run
    /// as [`USER`](Self::USER) when need be).
    fn args(&self, dir: &Path, command: &mut Command);

    /// Whether the server answers now; probed every [`POLL`](Self::POLL)
    /// until it does, for at most [`READY_WITHIN`](Self::READY_WITHIN).
    fn ready(&self, dir: &Path) -> bool;

    /// A shell script, run as [`USER`](Self::USER), that stops the server
    /// when the spawned process is not the server itself or wants a gentler
    /// end than `SIGKILL`; `None` (the default) when killing the spawned
    /// process is enough. After it runs, the skeleton waits up to ten
    /// seconds for the spawned process to end, then kills it. The
    /// watchdog runs the [`Stop::ForGood`] script too.
    fn stop(&self, dir: &Path, how: Stop) -> Option<String> {
        let _ = (dir, how);
        None
    }
}

/// Why a server is stopped, for [`Engine::stop`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// To start it again on the same directory: its data must survive.
    ToRestart,
    /// For good (drop, or the watchdog): as fast as possible.
    ForGood,
}

/// A server of engine `E` that this process started, in a temporary
/// directory of its own: stopped, and its directory removed, when dropped
/// (and by a watchdog once the test process is gone, however it ended).
#[derive(Debug)]
pub struct Throwaway<E: Engine> {
    engine: E,
    dir: tempfile::TempDir,
    /// The spawned process: the server, or `runuser` in front of it.
    child: Mutex<Child>,
}

impl<E: Engine> Throwaway<E> {
    /// Makes the directory (given to [`Engine::USER`] when this process is
    /// root), prepares it ([`Engine::prepare`]), spawns the server with a
    /// watchdog, and waits until it answers.
    ///
    /// # Errors
    /// [`Engine::INSTALL`] if the program is missing; else what failed, in
    /// words, naming the log to read. A server that started but did not
    /// answer is stopped again.
    pub fn start(engine: E) -> Result<Self, String> {
        let dir = tempfile::Builder::new()
            .prefix(E::DIR_PREFIX)
            .tempdir()
            .map_err(|e| format!("a temporary directory for {}: {e}", E::NAME))?;
        if let Some(user) = E::USER.filter(|_| is_root()) {
            run(
                Command::new("chown")
                    .arg(format!("{user}:"))
                    .arg(dir.path()),
                "chown (coreutils)",
            )?;
        }
        engine.prepare(dir.path())?;
        let child = spawn(&engine, dir.path())?;
        let server = Throwaway {
            engine,
            dir,
            child: Mutex::new(child),
        };
        // From here on, dropping `server` on an error stops what started.
        let mut child = server.child();
        server.watchdog(child.id())?;
        server.wait_ready(&mut child)?;
        drop(child);
        Ok(server)
    }

    /// The server's directory (its socket, data and log live there).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The spawned process's id: the server's own, unless it runs as
    /// [`Engine::USER`] through `runuser`.
    pub fn pid(&self) -> u32 {
        self.child().id()
    }

    /// Stops the server ([`Stop::ToRestart`]), spawns it again on the same
    /// directory (without [`Engine::prepare`]), with a watchdog, and waits
    /// until it answers.
    ///
    /// # Errors
    /// What failed, in words, naming the log to read.
    pub fn restart(&self) -> Result<(), String> {
        let mut child = self.child();
        self.halt(&mut child, Stop::ToRestart)?;
        *child = spawn(&self.engine, self.dir())?;
        self.watchdog(child.id())?;
        self.wait_ready(&mut child)
    }

    fn child(&self) -> MutexGuard<'_, Child> {
        self.child.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn log(&self) -> PathBuf {
        self.dir().join(E::LOG)
    }

    /// Probes until the server answers, it exits, or time is up.
    fn wait_ready(&self, child: &mut Child) -> Result<(), String> {
        let deadline = Instant::now() + E::READY_WITHIN;
        loop {
            if self.engine.ready(self.dir()) {
                return Ok(());
            }
            if let Ok(Some(status)) = child.try_wait() {
                // The log's last lines, in the message: the directory goes
                // with the server, once the caller drops it.
                return Err(format!(
                    "{} exited ({status}); the end of {}:\n{}",
                    E::NAME,
                    self.log().display(),
                    log_tail(&self.log(), 20)
                ));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "{} did not answer within {} s; see {}",
                    E::NAME,
                    E::READY_WITHIN.as_secs(),
                    self.log().display()
                ));
            }
            std::thread::sleep(E::POLL);
        }
    }

    /// Runs the engine's stop script, if any, gives the spawned process
    /// time to end, then kills and reaps it.
    ///
    /// # Errors
    /// If the stop script failed (the process is killed and reaped even
    /// so).
    fn halt(&self, child: &mut Child, how: Stop) -> Result<(), String> {
        let mut stopped = Ok(());
        if let Some(script) = self.engine.stop(self.dir(), how) {
            stopped = run(
                command_as(E::USER, "sh").args(["-c", &script]),
                "a POSIX shell (sh)",
            )
            .map_err(|e| format!("stopping {}: {e}", E::NAME));
            let deadline = Instant::now() + STOP_GRACE;
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        stopped
    }

    /// Starts a shell that, once this process is gone, runs the engine's
    /// [`Stop::ForGood`] script, kills the spawned process `child` and
    /// removes the directory.
    fn watchdog(&self, child: u32) -> Result<(), String> {
        let stop = match (self.engine.stop(self.dir(), Stop::ForGood), E::USER) {
            (None, _) => String::new(),
            (Some(script), Some(user)) if is_root() => {
                format!("runuser -u {user} -- sh -c {}; ", quote(&script))
            }
            (Some(script), _) => format!("{script}; "),
        };
        let script = format!(
            "while kill -0 {me} 2>/dev/null; do sleep 1; done; \
             {stop}kill -9 {child} 2>/dev/null; rm -rf {dir}",
            me = std::process::id(),
            dir = quote(&self.dir().display().to_string()),
        );
        Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map(drop)
            .map_err(|e| format!("starting the watchdog of {}: {e}", E::NAME))
    }
}

impl<E: Engine> Drop for Throwaway<E> {
    fn drop(&mut self) {
        let mut child = self.child();
        let _ = self.halt(&mut child, Stop::ForGood);
    }
}

/// Spawns the engine's program on `dir`, output appended to its log.
fn spawn<E: Engine>(engine: &E, dir: &Path) -> Result<Child, String> {
    let log = dir.join(E::LOG);
    let out = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(|e| format!("{}: {e}", log.display()))?;
    let err = out
        .try_clone()
        .map_err(|e| format!("{}: {e}", log.display()))?;
    let mut command = command_as(E::USER, engine.program());
    engine.args(dir, &mut command);
    command
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => E::INSTALL.to_string(),
            _ => format!("starting {}: {e}", E::NAME),
        })
}

/// `s` as one single-quoted shell word.
/// The last `lines` lines of the log at `path`, or why there are none.
fn log_tail(path: &Path, lines: usize) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(unreadable: {e})"),
    }
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The server a test process shares between its tests, kept in `cell`:
/// on first use, the one that environment variable `var` names (a URL of
/// the tester's own, when set and not empty; made with `named`), else a
/// throwaway one (made with `start`). Later calls return the same one.
///
/// # Panics
/// If `start` fails, with its message (what to install, or what failed):
/// a test that needs the server fails, it never skips.
pub fn shared<T: Send + Sync>(
    cell: &'static OnceLock<T>,
    var: &str,
    named: impl FnOnce(String) -> T,
    start: impl FnOnce() -> Result<T, String>,
) -> &'static T {
    cell.get_or_init(|| match std::env::var(var) {
        Ok(url) if !url.is_empty() => named(url),
        _ => start().unwrap_or_else(|e| panic!("{e}")),
    })
}

/// A name no other test uses, in this process or any other: `t`, this
/// process's id, a counter and eight hex digits of a random UUID, joined
/// by `_` (`t4242_0_1f0c9a3b`). Lower-case ASCII letters, digits and
/// underscores only, so it fits a schema, table prefix or key prefix.
pub fn fresh_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!(
        "t{}_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
        random.get(..8).unwrap_or(&random)
    )
}

/// Whether this process runs as root (`id -u` says 0); asked once.
fn is_root() -> bool {
    static ROOT: OnceLock<bool> = OnceLock::new();
    *ROOT.get_or_init(|| {
        Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|out| out.stdout.trim_ascii() == b"0")
    })
}

/// `program` run as `user` through `runuser` when this process is root
/// (and `user` is given); else run as this process's user.
pub fn command_as(user: Option<&str>, program: impl AsRef<OsStr>) -> Command {
    match user.filter(|_| is_root()) {
        Some(user) => {
            let mut command = Command::new("runuser");
            command.args(["-u", user, "--"]).arg(program);
            command
        }
        None => Command::new(program),
    }
}

/// Runs `command` to its end, standard input closed; its output is
/// captured unless the caller redirected it.
///
/// # Errors
/// `install` if the program is missing; else, if it fails, the command,
/// its exit status and what it printed.
pub fn run(command: &mut Command, install: &str) -> Result<(), String> {
    let out = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => install.to_string(),
            _ => format!("running {command:?}: {e}"),
        })?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{command:?} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr).trim_end()
    ))
}

#[cfg(test)]
mod tests {
    use super::log_tail;

    #[test]
    fn a_failed_start_quotes_the_end_of_its_log() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let log = dir.path().join("server.log");
        let text: Vec<String> = (1..=30).map(|i| format!("line {i}")).collect();
        std::fs::write(&log, text.join("\n")).expect("writing the log");
        let tail = log_tail(&log, 20);
        assert_eq!(tail.lines().next(), Some("line 11"));
        assert_eq!(tail.lines().last(), Some("line 30"));
        assert_eq!(tail.lines().count(), 20);
        assert!(log_tail(&dir.path().join("none.log"), 20).starts_with("(unreadable: "));
    }
}
