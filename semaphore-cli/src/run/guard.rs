//! The guardian: a small process that ends the command's process group
//! when `semaphore run` cannot (issue 21, items 2 and 3).
//!
//! `semaphore run` (the wrapper) starts `semaphore __guard` before the
//! command, in a process group of its own, with a pipe as its standard
//! input. The command is then started *into the guardian's group*: the
//! group exists before the command does, so there is no moment in which
//! the command runs in a group the guardian does not know. The command
//! starts only once the guardian has said `ready` on its standard output,
//! which it does after blocking the signals below: a Ctrl-Z that reached a
//! guardian still starting would stop it for good. The wrapper
//! writes it lines `deadline MS` (the lease is good for MS more
//! milliseconds). The guardian acts on:
//!
//! - **end of file**: the wrapper is gone, however it died (the kernel
//!   closes the pipe even on SIGKILL). The guardian kills the command's
//!   process group with SIGKILL at once and exits.
//! - **a deadline that passes**: the wrapper could not renew in time (it
//!   was stopped with SIGSTOP, or hangs). The lease may now be someone
//!   else's, so the command must not run on: SIGTERM to the group, SIGKILL
//!   after the grace period.
//! - `done`: the wrapper finished normally; exit without touching anything.
//!
//! So that signals meant for the wrapper's job or for the command do not
//! end or stop it, the guardian blocks the job-control and termination
//! signals; its own SIGKILL of the group ends it last. If it is stopped anyway (SIGSTOP sent to it by
//! pid), `PR_SET_PDEATHSIG` sends it SIGCONT when the wrapper dies, and it
//! then reads the end of file.
//!
//! The mechanism is the kernel's: pipe end-of-file, process groups, and on
//! Linux the parent-death signal. Processes that leave the command's
//! process group (`setsid`, daemons) are not followed.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::sys::signal::{SigSet, SigmaskHow, Signal, killpg, sigprocmask};
use nix::unistd::Pid;

/// How long a command gets between SIGTERM and SIGKILL once its lease is
/// lost or its deadline passed.
pub(crate) const GRACE: Duration = Duration::from_secs(5);

/// What the guardian writes on its standard output once its signals are
/// blocked.
const READY: &[u8] = b"ready\n";

/// How long the wrapper waits for that word before it gives up on the run.
const READY_WAIT: Duration = Duration::from_secs(30);

/// The hidden subcommand the wrapper runs the guardian as.
pub(crate) const SUBCOMMAND: &str = "__guard";

/// The wrapper's side: the guardian process and the pipe to it.
#[derive(Debug)]
pub(crate) struct Guard {
    child: tokio::process::Child,
    pipe: Option<std::process::ChildStdin>,
    /// The last deadline told, on this process's monotonic clock.
    deadline: Option<Instant>,
}

impl Guard {
    /// Starts the guardian (this same executable, hidden subcommand) and
    /// waits for its word that it is ready: it blocks the job-control
    /// signals first thing, but until it has, a Ctrl-Z sent to the group
    /// it shares with the command would stop it for good (no shell ever
    /// continues the guardian), leaving the command unguarded. Slow starts
    /// under load made that window real.
    pub(crate) async fn start() -> std::io::Result<Self> {
        use tokio::io::AsyncReadExt;
        let exe = std::env::current_exe()?;
        let mut child = std::process::Command::new(exe);
        // A group of its own, which the command joins: stopping or
        // signalling the wrapper's job (`kill -STOP %1`) must not reach it.
        std::os::unix::process::CommandExt::process_group(&mut child, 0);
        child
            .arg(SUBCOMMAND)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped());
        let mut child = tokio::process::Command::from(child).spawn()?;
        let mut word = [0u8; READY.len()];
        if let Some(mut stdout) = child.stdout.take() {
            // A guardian that never answers (an exec stuck on a hung file
            // system) must not hold the run, and its slot, forever. One
            // dropped here reads the end of its input and exits.
            tokio::time::timeout(READY_WAIT, stdout.read_exact(&mut word))
                .await
                .map_err(|_| {
                    std::io::Error::other(format!(
                        "it did not say it was ready within {} s",
                        READY_WAIT.as_secs()
                    ))
                })??;
        }
        if word != READY {
            return Err(std::io::Error::other("it did not say it was ready"));
        }
        let pipe = child
            .stdin
            .take()
            .and_then(|stdin| stdin.into_owned_fd().ok())
            .map(std::process::ChildStdin::from);
        Ok(Self {
            child,
            pipe,
            deadline: None,
        })
    }

    /// The guardian's process group, which the command joins: its pid.
    pub(crate) fn group(&self) -> Pid {
        Pid::from_raw(self.child.id().map_or(0, |id| id as i32))
    }

    /// Tells the guardian the lease is good for `left` more. The guardian
    /// acts a margin before that (a tenth of `ttl`, at most 1 s), so that
    /// the command has ended before the slot can be granted to anyone else.
    pub(crate) fn deadline(&mut self, left: Duration, ttl: Duration) {
        let margin = (ttl / 10).min(Duration::from_secs(1));
        let left = left.saturating_sub(margin);
        self.deadline = Some(Instant::now() + left);
        self.say(&format!("deadline {}\n", left.as_millis()));
    }

    /// Whether the last deadline told has passed: from then on the guardian
    /// ends the command, and an exit of the command counts as the lease's
    /// loss.
    pub(crate) fn passed(&self) -> bool {
        self.deadline.is_some_and(|at| at <= Instant::now())
    }

    /// The wrapper is done: the guardian exits and touches nothing.
    pub(crate) async fn finish(mut self) {
        self.say("done\n");
        self.pipe = None;
        let _ = self.child.wait().await;
    }

    /// Writes a line; a guardian that is gone is not an error of the run
    /// (the command goes on, unguarded, as it would without one).
    fn say(&mut self, line: &str) {
        if let Some(pipe) = self.pipe.as_mut()
            && pipe.write_all(line.as_bytes()).is_err()
        {
            self.pipe = None;
        }
    }
}

/// The guardian's own `main`: returns its exit code.
pub(crate) fn main() -> u8 {
    // Signals for the wrapper's job are not for the guardian.
    let mut blocked = SigSet::empty();
    for signal in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
        Signal::SIGTSTP,
        Signal::SIGTTIN,
        Signal::SIGTTOU,
        Signal::SIGPIPE,
    ] {
        blocked.add(signal);
    }
    let _ = sigprocmask(SigmaskHow::SIG_BLOCK, Some(&blocked), None);
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGCONT);
    // The wrapper starts the command only after this word.
    let mut stdout = std::io::stdout();
    if stdout
        .write_all(READY)
        .and_then(|()| stdout.flush())
        .is_err()
    {
        return 1;
    }
    let mut watch = Watch {
        group: Some(nix::unistd::getpgrp()),
        ..Watch::default()
    };
    let mut stdin = std::io::stdin().lock();
    let mut buf = Vec::new();
    loop {
        let timeout = watch
            .next()
            .map(|at| at.saturating_duration_since(Instant::now()));
        if !readable(&stdin, timeout) {
            watch.due();
            continue;
        }
        let mut chunk = [0u8; 256];
        let n = match stdin.read(&mut chunk) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => 0,
        };
        if n == 0 {
            // The wrapper is gone.
            watch.signal(Signal::SIGKILL);
            return 0;
        }
        buf.extend_from_slice(&chunk[..n]);
        while let Some(end) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=end).collect();
            match std::str::from_utf8(&line)
                .unwrap_or("")
                .trim()
                .split_once(' ')
            {
                Some(("deadline", ms)) if !watch.expired => {
                    if let Ok(ms) = ms.parse::<u64>() {
                        watch.deadline = Some(Instant::now() + Duration::from_millis(ms));
                    }
                }
                _ if line.starts_with(b"done") => return 0,
                _ => {}
            }
        }
    }
}

/// What the guardian watches.
#[derive(Debug, Default)]
struct Watch {
    group: Option<Pid>,
    /// The lease's end, as last told.
    deadline: Option<Instant>,
    /// When SIGKILL follows the SIGTERM sent at the deadline.
    kill_at: Option<Instant>,
    /// A deadline passed: the lease is gone for good, later ones are moot.
    expired: bool,
}

impl Watch {
    fn next(&self) -> Option<Instant> {
        match (self.deadline, self.kill_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// A deadline or the grace period ran out.
    fn due(&mut self) {
        let now = Instant::now();
        if self.deadline.is_some_and(|at| at <= now) {
            self.deadline = None;
            self.expired = true;
            self.signal(Signal::SIGTERM);
            self.kill_at = Some(now + GRACE);
            // After the signal, on a thread of its own and never panicking:
            // a terminal that is gone, or blocks (Ctrl-S), must not hold
            // back the SIGKILL.
            std::thread::spawn(|| {
                let _ = writeln!(
                    std::io::stderr(),
                    "semaphore run: the lease ran out while the wrapper could not renew it; \
                     ending the command"
                );
            });
        }
        if self.kill_at.is_some_and(|at| at <= now) {
            self.kill_at = None;
            self.signal(Signal::SIGKILL);
        }
    }

    fn signal(&self, signal: Signal) {
        if let Some(group) = self.group {
            let _ = killpg(group, signal);
        }
    }
}

/// Whether `stdin` has something to read (or its end) before `timeout`.
fn readable(stdin: &impl AsFd, timeout: Option<Duration>) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let timeout = match timeout {
        None => PollTimeout::NONE,
        Some(t) => PollTimeout::try_from(t).unwrap_or(PollTimeout::MAX),
    };
    let mut fds = [PollFd::new(stdin.as_fd(), PollFlags::POLLIN)];
    match poll(&mut fds, timeout) {
        Ok(0) => false,
        Ok(_) => true,
        // EINTR (a SIGCONT): look again.
        Err(_) => false,
    }
}
