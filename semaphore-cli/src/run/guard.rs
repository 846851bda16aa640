//! The guardian: a small process that ends the command's process group
//! when `semaphore run` cannot.
//!
//! `semaphore run` (the wrapper) starts `semaphore __guard` before the
//! command, in a process group of its own, with pipes as its standard
//! input and output. The command is then started *into the guardian's
//! group*: the group exists before the command does, so there is no moment
//! in which the command runs in a group the guardian does not know. The
//! command starts only once the guardian has said `ready` on its standard
//! output, which it does after blocking the signals below: a Ctrl-Z that
//! reached a guardian still starting would stop it for good.
//!
//! The guardian signals nothing unless the group is one the wrapper set up
//! for it: it refuses to start unless it leads a process group of its own
//! that its parent is not in, and it acts only once the wrapper has named
//! that group (`group PGID`, its own pid). Run by hand (`echo x |
//! semaphore __guard`), it exits with an error and ends nothing.
//!
//! The wrapper writes it `group PGID`, `kill-after MS`, `store ...` (the
//! store, as [`Choice::to_line`] writes it) and `lease POOL LEASE`, and,
//! while the command runs, lines `deadline US`: the command must be dead by
//! that time, in microseconds on `CLOCK_BOOTTIME` ([`clock`]), the lease's
//! local deadline less a margin. The time is absolute, on a
//! clock both processes read, so a line read late (the guardian stopped or
//! starved meanwhile) says a deadline that has already passed, never a
//! fresh one. The guardian acts on:
//!
//! - **end of file**: the wrapper is gone, however it died (the kernel
//!   closes the pipe even on SIGKILL). The guardian kills the command's
//!   process group with SIGKILL at once, itself included; first it starts
//!   a returner (`semaphore __return`, a group of its own), which waits
//!   until no process of the group runs and then returns the lease, so
//!   that the slot comes back at once on every store rather than at the
//!   session's end or the ttl.
//! - **the kill-after period before a deadline**: the wrapper did not
//!   confirm the lease in time (it was stopped, hangs, or the store is out
//!   of reach). The command must be dead before the deadline, whatever it
//!   does with SIGTERM: SIGTERM to the group then, SIGKILL at the
//!   deadline. A deadline found already past gets SIGKILL at once.
//! - `end US`: the wrapper found the lease lost and ends the command
//!   itself (SIGTERM now, SIGKILL at US). The guardian answers `ack` and
//!   sends no SIGTERM of its own from then on, so the command gets one;
//!   it still sends SIGKILL at US (or at the last deadline, if sooner)
//!   should the wrapper not.
//! - `done`: the wrapper finished normally; exit without touching anything.
//!
//! On its standard output the guardian says `term` before it sends
//! SIGTERM and `kill` before it sends SIGKILL, so that the wrapper knows,
//! when the command ends, that the guardian ended it (exit 70). What it
//! tells the user it writes before it signals, from its main thread, so
//! that its own SIGKILL of the group cannot lose it.
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

use nix::unistd::Pid;
use semaphore_core::{LeaseGuard, LeaseId, Pool, PoolId};

use crate::store::Choice;

/// Whether `lease` is held once it rests on the store's record
/// ([`LeaseGuard::confirmed`]). A slot handed on arrival counts only to
/// the store's short bound for it (200 ms to 1 s) until its confirmation
/// lands: the guardian's deadline, the bound less a margin of up to 1 s,
/// would be past at once and the command killed as it starts (seen in CI
/// under load). One round trip, then the whole window counts.
pub(crate) async fn confirmed(lease: &LeaseGuard<Pool>) -> bool {
    tokio::select! {
        () = lease.confirmed() => {}
        _ = lease.lost() => {}
    }
    lease.is_held()
}

/// How long the guardian waits for the command's group to be gone after
/// SIGKILL before it returns the lease: a process the kernel cannot kill
/// yet (in uninterruptible sleep) must not run beside the next holder, so
/// past this the lease is left to end by itself.
pub(super) const GONE_WAIT: Duration = Duration::from_secs(10);

/// How long returning the lease may take once the wrapper is gone.
pub(super) const RETURN_WAIT: Duration = Duration::from_secs(10);

/// What the guardian writes on its standard output once its signals are
/// blocked.
pub(super) const READY: &[u8] = b"ready\n";

/// How long the wrapper waits for that word before it gives up on the run.
pub(super) const READY_WAIT: Duration = Duration::from_secs(30);

/// How long the wrapper waits for the guardian to answer `end` before it
/// sends SIGTERM itself (a guardian stopped meanwhile reads `end` before
/// it looks at its deadline again, so it sends none).
pub(super) const ANSWER_WAIT: Duration = Duration::from_millis(200);

/// How long a line the wrapper must not lose (`end`, `done`) may wait for
/// room in the pipe (a guardian stopped with its pipe full).
pub(super) const WRITE_WAIT: Duration = Duration::from_millis(200);

/// How long the wrapper waits for the guardian to exit after `done`.
pub(super) const EXIT_WAIT: Duration = Duration::from_secs(2);

/// The longest the guardian sleeps without looking at the clock again (a
/// sleep does not count time the machine spent suspended; the deadlines
/// do).
pub(super) const LOOK_EVERY: Duration = Duration::from_secs(1);

/// The hidden subcommand the wrapper runs the guardian as.
pub(crate) const SUBCOMMAND: &str = "__guard";

/// The hidden subcommand the guardian runs the returner as.
pub(crate) const RETURNER: &str = "__return";

/// Now on the clock the wrapper's deadlines for the guardian are written
/// on: `CLOCK_BOOTTIME` on Linux (it never steps, counts time suspended,
/// and reads the same in every process), the system clock elsewhere.
/// (`nix::time` is enabled on Linux by semaphore-core, whose
/// `MonotonicClock` reads the same clock.)
pub(crate) fn clock() -> Duration {
    #[cfg(target_os = "linux")]
    {
        use nix::time::{ClockId, clock_gettime};
        if let Ok(t) = clock_gettime(ClockId::CLOCK_BOOTTIME) {
            return Duration::new(
                u64::try_from(t.tv_sec()).unwrap_or(0),
                u32::try_from(t.tv_nsec()).unwrap_or(0),
            );
        }
    }
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
}

/// A time on [`clock`] as the number a line carries: microseconds.
pub(super) fn micros(at: Duration) -> u128 {
    at.as_micros()
}

/// The time a line's number says.
pub(super) fn from_micros(text: &str) -> Option<Duration> {
    text.parse::<u64>().ok().map(Duration::from_micros)
}

/// The wrapper's side: the guardian process and the pipes to it.
#[derive(Debug)]
pub(crate) struct Guard {
    /// The guardian's pid: its process group, the command's.
    pid: Pid,
    /// Turns `true` once the guardian has exited (a task waits for it).
    exited: tokio::sync::watch::Receiver<bool>,
    pipe: Option<std::process::ChildStdin>,
    /// The guardian's standard output: what it says it did.
    words: Option<std::fs::File>,
    /// A word not yet whole.
    heard: Vec<u8>,
    /// The guardian said it sent SIGTERM or SIGKILL.
    acted: bool,
    /// The guardian answered `end`.
    acked: bool,
    /// How long before the lease's local deadline the command must be
    /// dead.
    margin: Duration,
}

impl Guard {
    /// Starts the guardian (this same executable, hidden subcommand) and
    /// waits for its word that it is ready: it blocks the job-control
    /// signals first thing, but until it has, a Ctrl-Z sent to the group
    /// it shares with the command would stop it for good (no shell ever
    /// continues the guardian), leaving the command unguarded. Slow starts
    /// under load made that window real.
    ///
    /// The guardian is then told its group, `kill_after`, the store
    /// (`choice`) and the lease it returns if the wrapper dies. The
    /// command must be dead `margin` before the lease's local deadline.
    pub(crate) async fn start(
        kill_after: Duration,
        margin: Duration,
        choice: &Choice,
        pool: PoolId,
        lease: LeaseId,
    ) -> std::io::Result<Self> {
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
        let mut words = None;
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
            words = stdout.into_owned_fd().ok().map(std::fs::File::from);
        }
        if word != READY {
            return Err(std::io::Error::other("it did not say it was ready"));
        }
        let pipe = child
            .stdin
            .take()
            .and_then(|stdin| stdin.into_owned_fd().ok())
            .map(std::process::ChildStdin::from);
        let group = child.id().unwrap_or(0);
        let (told, exited) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            let _ = child.wait().await;
            let _ = told.send(true);
        });
        let mut guard = Self {
            pid: Pid::from_raw(group as i32),
            exited,
            pipe,
            words,
            heard: Vec::new(),
            acted: false,
            acked: false,
            margin,
        };
        let setup = format!(
            "group {group}\nkill-after {}\nstore {}\nlease {pool} {lease}\n",
            kill_after.as_millis(),
            choice.to_line()
        );
        if !guard.say_within(&setup, READY_WAIT) {
            return Err(std::io::Error::other("it stopped reading its input"));
        }
        Ok(guard)
    }

    /// The guardian's process group, which the command joins: its pid.
    pub(crate) fn group(&self) -> Pid {
        self.pid
    }

    /// Completes once the guardian has exited, for whatever reason: it
    /// ended the command's group (itself included), it was killed, or
    /// it was told `done`. Borrows nothing of the guard.
    pub(crate) fn gone(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut exited = self.exited.clone();
        async move {
            let _ = exited.wait_for(|gone| *gone).await;
        }
    }

    /// Tells the guardian until when the lease is certainly held
    /// ([`LeaseGuard::time_left`]), on [`clock`]. The command must be dead
    /// a margin before that, so that it has ended before the slot can be
    /// granted to anyone else. Skipped if the guardian is not reading (a
    /// later deadline supersedes this one).
    pub(crate) fn deadline(&mut self, lease: &LeaseGuard<Pool>) {
        // The clock first: the deadline errs early, never late.
        let now = clock();
        let at = now + lease.time_left().saturating_sub(self.margin);
        self.say_within(&format!("deadline {}\n", micros(at)), Duration::ZERO);
    }

    /// Whether the guardian has said it signalled the command's group
    /// (SIGTERM or SIGKILL): from then on the command's end is the lease's
    /// (exit 70). It says so before it signals, so once the command has
    /// ended of it, this knows.
    pub(crate) fn acted(&mut self) -> bool {
        self.hear();
        self.acted
    }

    /// The wrapper ends the command itself (the lease was lost), SIGKILL
    /// `kill_in` from now: tells the guardian, which then sends no
    /// SIGTERM of its own. Whether the wrapper is to send SIGTERM: not if
    /// the guardian already did.
    pub(crate) async fn end(&mut self, kill_in: Duration) -> bool {
        if self.acted() {
            return false;
        }
        let at = clock() + kill_in;
        if !self.say_within(&format!("end {}\n", micros(at)), WRITE_WAIT) {
            return true;
        }
        let until = Instant::now() + ANSWER_WAIT;
        loop {
            if self.acted() {
                return false;
            }
            if self.acked || self.words.is_none() || Instant::now() >= until {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// The wrapper is done: the guardian exits and touches nothing.
    pub(crate) async fn finish(mut self) {
        self.say_within("done\n", WRITE_WAIT);
        self.pipe = None;
        // A guardian stopped (SIGSTOP by pid) reads `done` once continued;
        // the run does not wait for that.
        let _ = tokio::time::timeout(EXIT_WAIT, self.gone()).await;
    }

    /// Writes `line` if the pipe has room for it within `wait`; whether it
    /// was written. A guardian that is gone is not an error of the run
    /// (the command goes on, unguarded, as it would without one); one
    /// stopped with its pipe full must not stop the wrapper too.
    fn say_within(&mut self, line: &str, wait: Duration) -> bool {
        let Some(pipe) = self.pipe.as_mut() else {
            return false;
        };
        if !ready(pipe, nix::poll::PollFlags::POLLOUT, wait) {
            return false;
        }
        if pipe.write_all(line.as_bytes()).is_err() {
            self.pipe = None;
            return false;
        }
        true
    }

    /// Reads what the guardian said, without waiting.
    fn hear(&mut self) {
        while let Some(words) = self.words.as_mut() {
            if !ready(words, nix::poll::PollFlags::POLLIN, Duration::ZERO) {
                return;
            }
            let mut chunk = [0u8; 64];
            match words.read(&mut chunk) {
                Ok(0) | Err(_) => self.words = None,
                Ok(n) => self.heard.extend_from_slice(&chunk[..n]),
            }
            while let Some(end) = self.heard.iter().position(|b| *b == b'\n') {
                let word: Vec<u8> = self.heard.drain(..=end).collect();
                match word.as_slice() {
                    b"term\n" | b"kill\n" => self.acted = true,
                    b"ack\n" => self.acked = true,
                    _ => {}
                }
            }
        }
    }
}

/// Whether `fd` is ready for `events` within `wait` (a pipe with room for
/// a short write, or something to read); an error or a hang-up counts as
/// ready, so that the write or read that follows says what it is.
pub(super) fn ready(fd: &impl AsFd, events: nix::poll::PollFlags, wait: Duration) -> bool {
    use nix::poll::{PollFd, PollTimeout, poll};
    let deadline = Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        // Whole milliseconds, rounded up: a deadline is not looked at early.
        let ms = u64::try_from(left.as_micros().div_ceil(1000)).unwrap_or(u64::MAX);
        let timeout = PollTimeout::try_from(Duration::from_millis(ms)).unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(fd.as_fd(), events)];
        match poll(&mut fds, timeout) {
            Ok(0) => return false,
            Ok(_) => return true,
            // A signal (SIGCONT): look again, for what is left of `wait`.
            Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return false,
        }
    }
}
