//! `semaphore run` and its process tree: a
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

/// A command that ignores SIGTERM, under a wrapper stopped past
/// its lease, is dead before the lease's local deadline: the guardian
/// sends SIGTERM `--kill-after` before it and SIGKILL at it, so a second
/// run granted the slot never finds it running.
#[test]
fn a_command_that_ignores_sigterm_is_dead_before_the_slot_is_granted_again() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let pidfile = dir.path().join("first.pid");
    let line = format!(
        "trap '' TERM; echo $$ > {}; while :; do sleep 0.05; done",
        pidfile.display()
    );
    let first = run(
        &db,
        &[
            "--pool",
            "p",
            "--count",
            "1",
            "--ttl",
            "5s",
            "--kill-after",
            "1s",
            "--",
            "sh",
            "-c",
            &line,
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

/// `--kill-after` that cannot fit before a healthy lease's deadline is a
/// usage error that says what to change, and nothing is borrowed.
#[test]
fn a_kill_after_longer_than_the_lease_allows_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("u.db");
    let output = run(
        &db,
        &[
            "--pool",
            "p",
            "--count",
            "1",
            "--ttl",
            "3s",
            "--kill-after",
            "5s",
            "--",
            "true",
        ],
    )
    .output()
    .unwrap();
    assert_eq!(output.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--kill-after"), "{stderr}");
}

/// The holder knows first with a guardian held up: stopped (SIGSTOP) while the wrapper
/// goes on telling it deadlines, then the wrapper stopped too, until the
/// lease is gone and another run has had the slot. Continued, the
/// guardian reads the deadlines it missed; they are times on a clock both
/// read, already past, so it kills the command at once, with no SIGTERM
/// period as if they were new (the command writes a mark on SIGTERM).
#[test]
fn a_guardian_held_up_past_the_deadline_kills_at_once_when_it_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("h.db");
    let (pidfile, mark) = (dir.path().join("c.pid"), dir.path().join("termed"));
    let line = format!(
        "trap 'echo term >> {}' TERM; echo $$ > {}; while :; do sleep 0.05; done",
        mark.display(),
        pidfile.display()
    );
    let first = run(
        &db,
        &[
            "--pool", "p", "--count", "1", "--ttl", "2s", "--", "sh", "-c", &line,
        ],
    )
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let command = read_pid(&pidfile);
    let guardian = group_of(command);
    kill("STOP", &guardian.to_string());
    until(GUARD, "the guardian stopping", || stopped(guardian));
    // Deadlines pile up in its pipe meanwhile.
    std::thread::sleep(Duration::from_secs(1));
    kill("STOP", &first.id().to_string());

    let second = run(&db, &["--pool", "p", "--wait", "60s", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(0), "the lease never ended");

    kill("CONT", &guardian.to_string());
    until(GUARD, "the resumed guardian ending the command", || {
        ended(command)
    });
    assert!(
        !mark.exists(),
        "the guardian took a stale deadline for a new one (SIGTERM, then a wait)"
    );
    kill("CONT", &first.id().to_string());
    let output = first.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(70), "{stderr}");
    assert!(
        stderr.contains("did not confirm the lease in time"),
        "the guardian's message was lost: {stderr}"
    );
}

/// With `--kill-after 0s` SIGKILL follows at once, ending the guardian
/// with the group: what it tells the user is written before, not from a
/// thread that dies with it.
#[test]
fn the_guardians_message_survives_its_own_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("m.db");
    let pidfile = dir.path().join("c.pid");
    let line = format!(
        "echo $$ > {}; while :; do sleep 0.05; done",
        pidfile.display()
    );
    let first = run(
        &db,
        &[
            "--pool",
            "p",
            "--count",
            "1",
            "--ttl",
            "2s",
            "--kill-after",
            "0s",
            "--",
            "sh",
            "-c",
            &line,
        ],
    )
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let command = read_pid(&pidfile);
    kill("STOP", &first.id().to_string());
    until(GUARD, "the guardian ending the command", || ended(command));
    kill("CONT", &first.id().to_string());
    let output = first.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(70), "{stderr}");
    assert!(
        stderr.contains("did not confirm the lease in time"),
        "the guardian's message was lost: {stderr}"
    );
}

/// A command the guardian sent SIGTERM (its wrapper stopped past the
/// kill-after point) that then exits 0 of its own, after the wrapper was
/// continued and went on telling the guardian new deadlines: the run
/// still exits 70, as the guardian says it ended the command.
#[test]
fn a_command_the_guardian_ended_exits_70_though_the_wrapper_went_on() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("e.db");
    let (pidfile, mark, go) = (
        dir.path().join("c.pid"),
        dir.path().join("termed"),
        dir.path().join("go"),
    );
    let line = format!(
        "trap 'echo > {mark}; while [ ! -e {go} ]; do sleep 0.02; done; exit 0' TERM; \
         echo $$ > {pid}; while :; do sleep 0.05; done",
        mark = mark.display(),
        go = go.display(),
        pid = pidfile.display()
    );
    let first = run(
        &db,
        &[
            "--pool", "p", "--count", "1", "--ttl", "12s", "--", "sh", "-c", &line,
        ],
    )
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    read_pid(&pidfile);
    kill("STOP", &first.id().to_string());
    until(Duration::from_secs(30), "the guardian's SIGTERM", || {
        mark.exists()
    });
    kill("CONT", &first.id().to_string());
    // The wrapper renews and tells the guardian new deadlines (once a
    // second); the command then exits 0 of its own.
    std::thread::sleep(Duration::from_millis(1500));
    std::fs::write(&go, "").unwrap();
    let output = first.wait_with_output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(70),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `semaphore __guard` run by hand in a shell without job control (so in
/// the shell's process group) refuses to run: it kills nothing, even on
/// the end of its input, and the shell goes on.
#[test]
fn a_guardian_run_by_hand_kills_nothing() {
    let output = std::process::Command::new("setsid")
        .args([
            "-w",
            "bash",
            "-c",
            "echo x | \"$0\" __guard; echo \"survived $?\"",
            common::BIN,
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stdout} {stderr}");
    assert!(stdout.contains("survived 64"), "{stdout} {stderr}");
    assert!(stderr.contains("refusing"), "{stderr}");
}

/// A guardian that leads a process group of its own but was not told by a
/// wrapper which group to guard (or was told another) ends nothing: not on
/// a deadline, not on the end of its input, though another process is in
/// its group.
#[test]
fn a_guardian_not_told_its_own_group_kills_nothing() {
    use std::io::{BufRead, BufReader, Write};
    for told in ["", "group 1\n"] {
        let mut guardian = std::process::Command::new(common::BIN)
            .arg("__guard")
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut ready = String::new();
        BufReader::new(guardian.stdout.as_mut().unwrap())
            .read_line(&mut ready)
            .unwrap();
        assert_eq!(ready, "ready\n");
        let mut member = std::process::Command::new("sleep")
            .arg("60")
            .process_group(guardian.id() as i32)
            .spawn()
            .unwrap();
        let mut input = guardian.stdin.take().unwrap();
        // A deadline long past, then the end of the input.
        let _ = write!(input, "{told}kill-after 0\ndeadline 0\n");
        drop(input);
        let output = guardian.wait_with_output().unwrap();
        assert!(!output.status.success(), "{told:?}: {output:?}");
        assert!(
            member.try_wait().unwrap().is_none(),
            "{told:?}: the guardian killed a process of its group: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        member.kill().unwrap();
        member.wait().unwrap();
    }
}
