//! `semaphore run` typed into an interactive bash on a pseudo-terminal
//! (job control on), as a person would: the
//! command reads the terminal, Ctrl-C and Ctrl-Z reach it, `fg` resumes the
//! job, and a job stopped past its ttl is ended when resumed.

mod common;

use std::path::Path;
use std::time::Duration;

use common::BIN;
use common::process::{ended, read_pid, stopped, until};
use rexpect::session::PtyReplSession;

const GUARD: Duration = Duration::from_secs(20);

fn bash() -> PtyReplSession {
    rexpect::spawn_bash(Some(30_000))
        .expect("an interactive bash on a pseudo-terminal")
        // Sent when the session is dropped, so that bash ends at once.
        .quit_command(Some("exit".into()))
}

/// `semaphore run` on `db` with `args`, as a line for the shell.
fn line(db: &Path, args: &str) -> String {
    format!("{BIN} run --sqlite {} {args}", db.display())
}

/// The exit code of the last foreground job.
fn last_code(bash: &mut PtyReplSession) -> String {
    bash.wait_for_prompt().unwrap();
    bash.send_line("echo rc=$?").unwrap();
    let (_, code) = bash.exp_regex("rc=[0-9]+").unwrap();
    bash.wait_for_prompt().unwrap();
    code
}

/// The parent of `pid`.
fn parent(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
    fields[1].parse().unwrap()
}

#[test]
fn the_command_reads_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let mut bash = bash();
    bash.send_line(&line(
        &db,
        "--pool t --count 1 -- sh -c 'read x; echo got:$x'",
    ))
    .unwrap();
    bash.send_line("hello").unwrap();
    bash.exp_string("got:hello")
        .expect("the command could not read the terminal");
    assert_eq!(last_code(&mut bash), "rc=0");
}

#[test]
fn ctrl_c_reaches_the_command_and_the_code_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db");
    let pidfile = dir.path().join("c.pid");
    let mut bash = bash();
    bash.send_line(&line(
        &db,
        &format!(
            "--pool t --count 1 -- sh -c 'echo $$ > {}; exec sleep 100'",
            pidfile.display()
        ),
    ))
    .unwrap();
    let command = read_pid(&pidfile);
    bash.send_control('c').unwrap();
    until(GUARD, "the command ending on Ctrl-C", || ended(command));
    assert_eq!(last_code(&mut bash), "rc=130");
}

#[test]
fn ctrl_z_stops_wrapper_and_command_together_and_fg_resumes_them() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("z.db");
    let pidfile = dir.path().join("z.pid");
    let mut bash = bash();
    bash.send_line(&line(
        &db,
        &format!(
            "--pool t --count 1 -- sh -c 'echo $$ > {}; read x; echo got:$x'",
            pidfile.display()
        ),
    ))
    .unwrap();
    let command = read_pid(&pidfile);
    let wrapper = parent(command);
    bash.send_control('z').unwrap();
    bash.exp_string("Stopped")
        .expect("the shell saw no stopped job");
    until(GUARD, "wrapper and command both stopped", || {
        stopped(wrapper) && stopped(command)
    });
    bash.wait_for_prompt().unwrap();
    bash.send_line("fg").unwrap();
    bash.send_line("again").unwrap();
    bash.exp_string("got:again")
        .expect("the resumed command could not read the terminal");
    assert_eq!(last_code(&mut bash), "rc=0");
}

#[test]
fn a_job_stopped_past_its_ttl_is_ended_when_resumed() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("x.db");
    let pidfile = dir.path().join("x.pid");
    let mut bash = bash();
    bash.send_line(&line(
        &db,
        &format!(
            "--pool t --count 1 --ttl 2s -- sh -c 'echo $$ > {}; read x; echo ran-on:$x'",
            pidfile.display()
        ),
    ))
    .unwrap();
    let command = read_pid(&pidfile);
    bash.send_control('z').unwrap();
    bash.exp_string("Stopped")
        .expect("the shell saw no stopped job");
    // The lease runs out while the job is stopped; the guardian ends it.
    until(GUARD, "the stopped command being ended", || ended(command));
    bash.wait_for_prompt().unwrap();
    bash.send_line("fg").unwrap();
    assert_eq!(last_code(&mut bash), "rc=70");
}

/// `( semaphore run ... & )`: an orphaned background job, which no shell
/// will continue. A command that stops to read the terminal cannot have it;
/// it is hung up (as the kernel does to stopped members of an orphaned
/// group) instead of being stopped and continued forever.
#[test]
fn an_orphaned_background_job_reading_the_terminal_is_hung_up() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("o.db");
    let pidfile = dir.path().join("o.pid");
    let mut bash = bash();
    bash.send_line(&format!(
        "( {} & )",
        line(
            &db,
            &format!(
                "--pool t --count 1 -- sh -c 'echo $$ > {}; read x < /dev/tty; echo got:$x'",
                pidfile.display()
            ),
        )
    ))
    .unwrap();
    let command = read_pid(&pidfile);
    until(GUARD, "the orphaned command being hung up", || {
        ended(command)
    });
}
