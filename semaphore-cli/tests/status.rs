//! `semaphore status` and `run`'s waiting line, read back from a
//! pseudo-terminal through a terminal emulator (vt100) as a person would
//! see them: `status --watch` draws the pool again in place as holders
//! come and go and leaves the screen on Ctrl-C; a waiting `run` says
//! where it stands on one line it clears when granted, and says nothing
//! with `--quiet` or when standard error is not a terminal.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::BIN;
use common::process::until;
use rexpect::session::PtySession;
use serde_json::Value;

const GUARD: Duration = Duration::from_secs(20);

/// `semaphore SUBCOMMAND --sqlite DB ARGS`.
fn semaphore(db: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .arg(args[0])
        .arg("--sqlite")
        .arg(db)
        .args(&args[1..]);
    command
}

/// `semaphore SUBCOMMAND --sqlite DB ARGS` on a pseudo-terminal.
fn on_a_terminal(db: &Path, args: &[&str]) -> PtySession {
    rexpect::session::spawn_command(semaphore(db, args), Some(20_000)).expect("a pseudo-terminal")
}

/// Pool `gpus`' status as `--json` gives it.
fn status(db: &Path) -> Value {
    let out = semaphore(db, &["status", "--pool", "gpus", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A `run` holding pool `gpus`' one slot as `owner` until it is ended,
/// its output piped.
fn holder(db: &Path, owner: &str) -> Child {
    let registered = semaphore(db, &["register", "--pool", "gpus", "--count", "1"])
        .output()
        .unwrap();
    assert!(registered.status.success());
    let child = semaphore(
        db,
        &[
            "run", "--pool", "gpus", "--count", "1", "--owner", owner, "--", "sleep", "60",
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    until(GUARD, "the holder's slot", || {
        status(db)["slots"][0]["owner"] == owner
    });
    child
}

/// Ends a `run` as SIGTERM does: the command ends, the slot is returned.
fn end(mut run: Child) {
    common::process::kill("TERM", &run.id().to_string());
    run.wait().unwrap();
}

/// What a terminal shows after `output`.
fn screen(output: &str) -> vt100::Parser {
    let mut parser =
        vt100::Parser::new(vt100::Parser::DEFAULT_ROWS, vt100::Parser::DEFAULT_COLS, 0);
    parser.process(output.as_bytes());
    parser
}

#[test]
fn status_watch_draws_the_pool_again_in_place_until_ctrl_c() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("status.db");
    let first = holder(&db, "trainer-a");
    let mut watch = on_a_terminal(
        &db,
        &["status", "--pool", "gpus", "--watch", "--interval", "100ms"],
    );
    let mut seen = watch.exp_string("trainer-a").unwrap();
    seen.push_str("trainer-a");
    let shown = screen(&seen);
    assert!(
        shown.screen().alternate_screen(),
        "drawn on the alternate screen"
    );
    let text = shown.screen().contents();
    assert!(
        text.contains("pool gpus") && text.contains("1 of 1 slots in use"),
        "{text}"
    );

    end(first);
    seen.push_str(&watch.exp_string("(no slot held)").unwrap());
    seen.push_str("(no slot held)");
    let text = screen(&seen).screen().contents();
    assert!(text.contains("0 of 1 slots in use"), "{text}");
    assert!(
        !text.contains("trainer-a"),
        "drawn again in place, not below: {text}"
    );

    watch.send_control('c').unwrap();
    seen.push_str(&watch.exp_eof().unwrap());
    let after = screen(&seen);
    assert!(
        !after.screen().alternate_screen(),
        "the screen is left on Ctrl-C"
    );
    assert!(!after.screen().hide_cursor(), "the cursor is shown again");
}

#[test]
fn a_waiting_run_says_where_it_stands_only_on_a_terminal_and_clears_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("waiting.db");
    let first = holder(&db, "trainer-a");
    let waiters = |db: &Path| status(db)["waiters"].as_array().unwrap().len();
    // Queued in this order: a quiet run on a terminal, a run whose
    // standard error is a pipe, and a run on a terminal.
    let mut quiet = on_a_terminal(
        &db,
        &[
            "run",
            "--quiet",
            "--pool",
            "gpus",
            "--",
            "echo",
            "granted-quiet",
        ],
    );
    until(GUARD, "the quiet run queued", || waiters(&db) == 1);
    let piped = semaphore(
        &db,
        &["run", "--pool", "gpus", "--", "echo", "granted-piped"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    until(GUARD, "the piped run queued", || waiters(&db) == 2);
    let mut shown = on_a_terminal(
        &db,
        &["run", "--pool", "gpus", "--", "echo", "granted-shown"],
    );
    let mut seen = shown
        .exp_string("waiting for a slot of gpus: 3rd in line")
        .unwrap();
    seen.push_str("waiting for a slot of gpus: 3rd in line");
    // The others have waited longer than the line takes to show.
    end(first);
    let quiet_output = quiet.exp_eof().unwrap();
    assert!(quiet_output.contains("granted-quiet"), "{quiet_output}");
    assert!(
        !quiet_output.contains("waiting for"),
        "--quiet shows no line: {quiet_output}"
    );
    let piped = piped.wait_with_output().unwrap();
    assert!(String::from_utf8_lossy(&piped.stdout).contains("granted-piped"));
    let stderr = String::from_utf8_lossy(&piped.stderr);
    assert!(
        !stderr.contains("waiting for"),
        "no line on a pipe: {stderr}"
    );
    seen.push_str(&shown.exp_eof().unwrap());
    let text = screen(&seen).screen().contents();
    assert!(text.contains("granted-shown"), "{text}");
    assert!(
        !text.contains("waiting for"),
        "the line is cleared when granted: {text}"
    );
}

/// Ctrl-C while a run waits on a terminal ends the wait: its place
/// leaves the line at once, the waiting line is cleared, the run says
/// why and exits 130 (128 + SIGINT), and its command never runs.
#[test]
fn ctrl_c_while_a_run_waits_clears_its_line_and_leaves_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("interrupted.db");
    let first = holder(&db, "trainer-a");
    let mut shown = on_a_terminal(&db, &["run", "--pool", "gpus", "--", "echo", "ran"]);
    let mut seen = shown
        .exp_string("waiting for a slot of gpus: 1st in line")
        .unwrap();
    seen.push_str("waiting for a slot of gpus: 1st in line");
    shown.send_control('c').unwrap();
    seen.push_str(&shown.exp_eof().unwrap());
    // rexpect's `WaitStatus`, by its form: `Exited(Pid(..), 130)`.
    let exit = format!("{:?}", shown.process().wait().unwrap());
    assert!(
        exit.starts_with("Exited(") && exit.ends_with(", 130)"),
        "{exit}: {seen}"
    );
    let text = screen(&seen).screen().contents();
    assert!(!text.contains("in line"), "the line is cleared: {text}");
    assert!(
        text.contains("SIGINT while waiting for a slot of gpus"),
        "{text}"
    );
    assert!(!text.contains("ran"), "the command never ran: {text}");
    assert_eq!(
        status(&db)["waiters"].as_array().unwrap().len(),
        0,
        "its place left the line"
    );
    end(first);
}

#[test]
fn status_watch_gives_the_terminal_back_on_term_hup_and_quit() {
    use rexpect::process::Signal;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("signals.db");
    let registered = semaphore(&db, &["register", "--pool", "gpus", "--count", "1"])
        .output()
        .unwrap();
    assert!(registered.status.success());
    for (signal, code) in [
        (Signal::SIGTERM, 143),
        (Signal::SIGHUP, 129),
        (Signal::SIGQUIT, 131),
    ] {
        let mut watch = on_a_terminal(
            &db,
            &["status", "--pool", "gpus", "--watch", "--interval", "100ms"],
        );
        let mut seen = watch.exp_string("no one waits").unwrap();
        watch.process_mut().signal(signal).unwrap();
        seen.push_str(&watch.exp_eof().unwrap());
        let after = screen(&seen);
        assert!(
            !after.screen().alternate_screen(),
            "{signal}: the screen is left"
        );
        assert!(
            !after.screen().hide_cursor(),
            "{signal}: the cursor is shown"
        );
        let status = watch.process().wait().unwrap();
        // rexpect's `WaitStatus`, by its form: `Exited(Pid(..), code)`.
        let shown = format!("{status:?}");
        let exited = shown.starts_with("Exited(") && shown.ends_with(&format!(", {code})"));
        assert!(exited, "{signal}: {shown}");
    }
}
