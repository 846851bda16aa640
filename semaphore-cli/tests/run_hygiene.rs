//! `semaphore run` and its process tree (issue 21, items 1 to 3): a
//! stopped wrapper, a killed wrapper, signals to a stopped command. Real
//! processes, no terminal (see `terminal.rs` for those).

mod common;

use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::Duration;

use common::process::{ended, group_of, kill, read_pid, run, stopped, until};

const GUARD: Duration = Duration::from_secs(20);

/// SIGSTOP to the wrapper alone, past its ttl: the command must have ended
/// before the slot is granted again (the second run checks, while holding
/// the slot, that the first command is gone); continued, the wrapper exits
/// 70.
#[test]
fn a_stopped_wrapper_past_its_ttl_ends_the_command_before_the_slot_is_granted_again() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let pidfile = dir.path().join("first.pid");
    let line = format!(
        "echo $$ > {}; while :; do sleep 0.05; done",
        pidfile.display()
    );
    let first = run(
        &db,
        &[
            "--pool", "p", "--count", "1", "--ttl", "2s", "--", "sh", "-c", &line,
        ],
    )
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let command = read_pid(&pidfile);
    kill("STOP", &first.id().to_string());

    let check = format!("test ! -d /proc/{command} || grep -q ') Z' /proc/{command}/stat");
    let second = run(
        &db,
        &["--pool", "p", "--wait", "60s", "--", "sh", "-c", &check],
    )
    .output()
    .unwrap();
    assert_eq!(
        second.status.code(),
        Some(0),
        "the second run got the slot while the first command still ran"
    );

    kill("CONT", &first.id().to_string());
    let output = first.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(70));
}

/// SIGKILL of the wrapper ends the command and what it started in the
/// background (`sleep &`), not only its direct child.
#[test]
fn sigkill_of_the_wrapper_ends_the_commands_background_processes_too() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("k.db");
    let pidfile = dir.path().join("bg.pid");
    let line = format!("sleep 100 & echo $! > {}; wait", pidfile.display());
    let mut wrapper = run(
        &db,
        &["--pool", "p", "--count", "1", "--", "sh", "-c", &line],
    )
    .spawn()
    .unwrap();
    let background = read_pid(&pidfile);
    wrapper.kill().unwrap(); // SIGKILL
    wrapper.wait().unwrap();
    until(GUARD, "the background sleep ending", || ended(background));
}

/// A signal for the wrapper reaches a stopped process of the command and
/// continues it, so that it acts on the signal instead of staying stopped
/// forever. (The command's shell ignores SIGTERM and waits for the stopped
/// process, so nothing else can end it.)
#[test]
fn a_signal_to_the_wrapper_also_continues_a_stopped_process_of_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db");
    let pidfile = dir.path().join("bg.pid");
    let line = format!(
        "sleep 100 & pid=$!; trap '' TERM; echo $pid > {}; \
         while kill -0 $pid 2>/dev/null; do sleep 0.05; done",
        pidfile.display()
    );
    let wrapper = run(
        &db,
        &["--pool", "p", "--count", "1", "--", "sh", "-c", &line],
    )
    .spawn()
    .unwrap();
    let background = read_pid(&pidfile);
    kill("STOP", &background.to_string());
    until(GUARD, "the background sleep stopping", || {
        stopped(background)
    });
    kill("TERM", &wrapper.id().to_string());
    until(GUARD, "the stopped sleep acting on SIGTERM", || {
        ended(background)
    });
    let output = wrapper.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "the command's own code");
}

/// A command that writes its pid, then runs until a gate file appears and
/// exits 3: its database, pid file, gate, and `bash -c` line. It forks
/// nothing while it waits (the builtin `read -t` is its pause), so a stop
/// cannot land on a child caught between `vfork` and `exec`, which would
/// leave the shell itself unstoppable.
struct Gated {
    db: std::path::PathBuf,
    pidfile: std::path::PathBuf,
    gate: std::path::PathBuf,
    line: String,
}

impl Gated {
    fn in_dir(dir: &std::path::Path) -> Self {
        let (pidfile, gate) = (dir.join("c.pid"), dir.join("gate"));
        let line = format!(
            "echo $$ > {}; while [ ! -e {} ]; do read -t 0.02; done; exit 3",
            pidfile.display(),
            gate.display()
        );
        Self {
            db: dir.join("g.db"),
            pidfile,
            gate,
            line,
        }
    }
}

/// The command's group stopped from outside (`kill -STOP -PGID`, what
/// Ctrl-Z does): the wrapper stops with it, so the shell sees one stopped
/// job; continued, both go on and the command finishes normally.
#[test]
fn the_wrapper_stops_and_goes_on_with_its_command() {
    let dir = tempfile::tempdir().unwrap();
    let Gated {
        db,
        pidfile,
        gate,
        line,
    } = Gated::in_dir(dir.path());
    // A job of its own, as a job-control shell starts it: its group is not
    // orphaned (this process, its parent, is in another group of the same
    // session), so its stops are not discarded.
    let wrapper = run(
        &db,
        &["--pool", "p", "--count", "1", "--", "bash", "-c", &line],
    )
    .process_group(0)
    .stdin(Stdio::piped())
    .spawn()
    .unwrap();
    let command = read_pid(&pidfile);
    kill("TSTP", &format!("-{}", group_of(command)));
    until(GUARD, "the wrapper stopping with its command", || {
        stopped(wrapper.id()) && stopped(command)
    });
    std::fs::write(&gate, "").unwrap();
    kill("CONT", &wrapper.id().to_string());
    let output = wrapper.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(3), "the command's own code");
}

/// In an orphaned process group (here: started with `setsid`), no shell
/// will continue a stopped job and the kernel discards stop signals from
/// the terminal: a stop of the command is not followed, it goes on and
/// finishes as it would on its own.
#[test]
fn in_an_orphaned_group_a_stop_of_the_command_is_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let Gated {
        db,
        pidfile,
        gate,
        line,
    } = Gated::in_dir(dir.path());
    let wrapper = std::process::Command::new("setsid")
        .arg(common::BIN)
        .args(["run", "--sqlite"])
        .arg(&db)
        .args(["--pool", "p", "--count", "1", "--", "bash", "-c", &line])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let command = read_pid(&pidfile);
    kill("TSTP", &format!("-{}", group_of(command)));
    std::fs::write(&gate, "").unwrap();
    let output = wrapper.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(3), "the command's own code");
}
