//! `semaphore run` whose guardian is killed while the command runs: it
//! notices at once, ends the command (which must never run on unguarded:
//! a later SIGKILL or SIGSTOP of the wrapper would leave it running beside
//! the slot's next holder), returns the lease and exits 70 saying why.
//! (It went on with no word; the sixth round's probe then saw two
//! commands overlap by up to 1.6 s.) Real processes.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::BIN;
use common::process::{ended, group_of, kill, read_pid};

#[test]
fn a_killed_guardian_ends_the_command_and_returns_the_lease() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("guardian.db");
    let db = db.to_str().unwrap();
    let pidfile = dir.path().join("command.pid");
    let line = format!("echo $$ > {}; exec sleep 100", pidfile.display());
    let first = Command::new(BIN)
        .args(["run", "--sqlite", db, "--pool", "guarded", "--count", "1"])
        .args(["--kill-after", "1s", "--", "sh", "-c", &line])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let command = read_pid(&pidfile);
    // The command runs in the guardian's process group: its leader.
    let guardian = group_of(command);
    assert_ne!(guardian, command);
    kill("KILL", &guardian.to_string());
    let started = Instant::now();
    let out = wait_within(first, Duration::from_secs(20));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(70), "{stderr}");
    assert!(stderr.contains("guardian"), "it says why: {stderr}");
    assert!(ended(command), "the command was ended");
    // Ended with SIGTERM: well before a 100 s sleep would have.
    assert!(started.elapsed() < Duration::from_secs(20));
    // The lease came back: the next run gets the slot without waiting.
    let next = Command::new(BIN)
        .args(["run", "--sqlite", db, "--pool", "guarded", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(
        next.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&next.stderr)
    );
}

/// The child's output once it exits within `bound`; killed and failed if
/// it does not (the wrapper went on unguarded).
fn wait_within(mut child: std::process::Child, bound: Duration) -> std::process::Output {
    let until = Instant::now() + bound;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > until {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!(
                "semaphore run went on after its guardian was killed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}
