//! Helpers for tests that run `semaphore run` and watch real processes.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::BIN;

/// `semaphore run --sqlite DB ARGS...`.
pub fn run(db: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command.args(["run", "--sqlite"]).arg(db).args(args);
    command
}

/// Polls `done` up to `guard`; a hang is a failure, not a timing claim.
pub fn until(guard: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < guard,
            "{what} did not happen within {guard:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The state letter of process `pid` (R, S, T, Z, ...), `None` once gone.
pub fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) S ...": comm may hold anything, the state follows the
    // last parenthesis.
    stat.rsplit_once(") ")?.1.chars().next()
}

/// The process group of `pid`.
pub fn group_of(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
    fields[2].parse().unwrap()
}

/// Whether `pid` has ended (gone, or a zombie nobody reaped yet).
pub fn ended(pid: u32) -> bool {
    matches!(state(pid), None | Some('Z' | 'X'))
}

/// Whether `pid` is stopped.
pub fn stopped(pid: u32) -> bool {
    state(pid) == Some('T')
}

/// The number a command wrote to `file` (a pid), once it has.
pub fn read_pid(file: &Path) -> u32 {
    until(
        Duration::from_secs(20),
        "the command writing its pid",
        || std::fs::read_to_string(file).is_ok_and(|p| p.ends_with('\n')),
    );
    std::fs::read_to_string(file)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Sends `signal` (as `kill -SIG`) to `target` (a pid, or -pgid).
pub fn kill(signal: &str, target: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg("--")
        .arg(target)
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} {target}");
}
