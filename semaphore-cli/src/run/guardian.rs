//! The guardian process (`semaphore __guard`): the other side of
//! [`Guard`]; its protocol is in [`super::guard`]'s
//! docs.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::time::Duration;

use nix::sys::signal::{SigSet, SigmaskHow, Signal, killpg, sigprocmask};
use nix::unistd::Pid;
use semaphore_core::{LeaseId, PoolId};

use super::guard::*;
use super::returner::start_returner;
use crate::store::Choice;

/// Why this process may not act as a guardian, if it may not: it must
/// lead a process group of its own, which its parent (the wrapper) is not
/// in. Run by hand in a shell without job control, it would be in its
/// caller's group; in a pipeline, in the pipeline's.
fn own_group() -> Result<Pid, String> {
    use nix::unistd::{getpgid, getpgrp, getpid, getppid};
    let (me, group) = (getpid(), getpgrp());
    if group != me {
        return Err(format!(
            "it does not lead a process group of its own (it is in group {group}, \
             which is not its to end)"
        ));
    }
    if getpgid(Some(getppid())).is_ok_and(|parent| parent == group) {
        return Err("the process that started it is in its process group".into());
    }
    Ok(me)
}

/// Tells the user `text` on standard error before the guardian signals:
/// from this thread if standard error has room (the group's SIGKILL, which
/// ends the guardian too, cannot cut it short then), else from a thread of
/// its own, so that a terminal that blocks (Ctrl-S) does not hold back
/// the signal.
fn tell_user(text: String) {
    let stderr = std::io::stderr();
    if ready(&stderr, nix::poll::PollFlags::POLLOUT, Duration::ZERO) {
        let _ = stderr.lock().write_all(text.as_bytes());
    } else {
        std::thread::spawn(move || {
            let _ = std::io::stderr().write_all(text.as_bytes());
        });
    }
}

/// Says `word` to the wrapper (it may be gone: then no one listens).
fn say(word: &[u8]) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(word).and_then(|()| stdout.flush());
}

/// The guardian's own `main`: returns its exit code.
pub(crate) fn main() -> u8 {
    // Before anything: a guardian that is not the wrapper's ends nothing.
    let me = match own_group() {
        Ok(me) => me,
        Err(why) => {
            let _ = writeln!(
                std::io::stderr(),
                "semaphore {SUBCOMMAND}: refusing to run: {why}. It is started by \
                 `semaphore run` only, in a process group set up for it."
            );
            return crate::exit::code::USAGE;
        }
    };
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
    let mut watch = Watch::default();
    // The pipe itself, unbuffered: a line that sat in a buffer would be
    // read only after the deadlines were looked at.
    let Ok(mut stdin) = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .map(std::fs::File::from)
    else {
        return 1;
    };
    let mut buf = Vec::new();
    loop {
        // Every line waiting is read before any deadline is looked at: a
        // guardian held up reads the newest deadline, and `end`, first.
        let timeout = watch
            .next()
            .map(|at| at.saturating_sub(clock()).min(LOOK_EVERY));
        if !ready(
            &stdin,
            nix::poll::PollFlags::POLLIN,
            timeout.unwrap_or(LOOK_EVERY),
        ) {
            watch.due(clock());
            continue;
        }
        let mut chunk = [0u8; 256];
        let n = match stdin.read(&mut chunk) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => 0,
        };
        if n == 0 {
            // The wrapper is gone: the command goes, then its lease.
            let Some(group) = watch.group else {
                let _ = writeln!(
                    std::io::stderr(),
                    "semaphore {SUBCOMMAND}: its input ended before it was told the group \
                     to guard; ending nothing"
                );
                return 1;
            };
            if let (Some(store), Some((pool, lease))) = (&watch.store, watch.lease) {
                start_returner(store, pool, lease, group);
            }
            let _ = killpg(group, Signal::SIGKILL);
            return 0;
        }
        buf.extend_from_slice(&chunk[..n]);
        while let Some(end) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=end).collect();
            let line = std::str::from_utf8(&line).unwrap_or("").trim();
            match line.split_once(' ').unwrap_or((line, "")) {
                ("group", pid) => {
                    if pid.parse::<i32>().ok() != Some(me.as_raw()) {
                        let _ = writeln!(
                            std::io::stderr(),
                            "semaphore {SUBCOMMAND}: told to guard group {pid}, but it leads \
                             group {me}; ending nothing"
                        );
                        return crate::exit::code::USAGE;
                    }
                    watch.group = Some(me);
                }
                ("deadline", at) => {
                    if !watch.expired
                        && let Some(at) = from_micros(at)
                    {
                        watch.deadline = Some(at);
                    }
                }
                ("end", at) => {
                    if let Some(at) = from_micros(at) {
                        watch.end(at);
                    }
                }
                ("kill-after", ms) => {
                    if let Ok(ms) = ms.parse::<u64>() {
                        watch.kill_after = Duration::from_millis(ms);
                    }
                }
                ("store", line) => watch.store = Choice::from_line(line),
                ("lease", ids) => {
                    watch.lease = ids
                        .split_once(' ')
                        .and_then(|(pool, lease)| Some((pool.parse().ok()?, lease.parse().ok()?)));
                }
                ("done", _) => return 0,
                _ => {}
            }
        }
    }
}

/// What the guardian watches. Times are on [`clock`].
#[derive(Debug, Default)]
struct Watch {
    /// The group to end, once the wrapper has named it (this process's).
    group: Option<Pid>,
    /// When the command must be dead, as last told.
    deadline: Option<Duration>,
    /// How long before the deadline SIGTERM goes.
    kill_after: Duration,
    /// When SIGKILL follows.
    kill_at: Option<Duration>,
    /// The command is being ended (SIGTERM went, or the wrapper said
    /// `end`): later deadlines are moot, and no SIGTERM goes again.
    expired: bool,
    /// The wrapper is ending the command itself: SIGKILL here is only its
    /// backstop, and the wrapper tells the user.
    wrapper_ends: bool,
    /// SIGTERM went from here.
    termed: bool,
    /// The store and the lease to return if the wrapper dies.
    store: Option<Choice>,
    lease: Option<(PoolId, LeaseId)>,
}

impl Watch {
    /// When SIGTERM goes, as of the last deadline.
    fn term_at(&self) -> Option<Duration> {
        self.deadline.map(|at| at.saturating_sub(self.kill_after))
    }

    fn next(&self) -> Option<Duration> {
        match (self.term_at(), self.kill_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The wrapper ends the command itself, SIGKILL at `at`.
    fn end(&mut self, at: Duration) {
        if self.expired {
            // SIGTERM went from here already (and `term` was said).
            return;
        }
        self.expired = true;
        self.wrapper_ends = true;
        self.kill_at = Some(self.deadline.take().map_or(at, |d| d.min(at)));
        say(b"ack\n");
    }

    /// At `now`: SIGTERM if the kill-after period before the deadline has
    /// come, SIGKILL if the deadline (or the SIGKILL after `end`) has.
    fn due(&mut self, now: Duration) {
        let Some(group) = self.group else {
            return;
        };
        if !self.expired
            && let Some(deadline) = self.deadline
            && self.term_at().is_some_and(|at| at <= now)
        {
            self.expired = true;
            self.deadline = None;
            self.kill_at = Some(deadline);
            if deadline > now {
                say(b"term\n");
                tell_user(format!(
                    "semaphore run: the wrapper did not confirm the lease in time (it is \
                     stopped or hung, or the store is out of reach); ending the command: \
                     SIGTERM now, SIGKILL in {} ms, at the lease's deadline\n",
                    (deadline - now).as_millis()
                ));
                self.termed = true;
                let _ = killpg(group, Signal::SIGTERM);
                let _ = killpg(group, Signal::SIGCONT);
            }
        }
        if self.kill_at.is_some_and(|at| at <= now) {
            self.kill_at = None;
            say(b"kill\n");
            if !self.wrapper_ends {
                tell_user(if self.termed {
                    "semaphore run: the command did not end by the lease's deadline; \
                     killing it (SIGKILL)\n"
                        .to_string()
                } else {
                    "semaphore run: the wrapper did not confirm the lease in time (it is \
                     stopped or hung, or the store is out of reach), and the lease's \
                     deadline has come; killing the command (SIGKILL)\n"
                        .to_string()
                });
            }
            // The guardian is in the group: this ends it too.
            let _ = killpg(group, Signal::SIGKILL);
        }
    }
}
