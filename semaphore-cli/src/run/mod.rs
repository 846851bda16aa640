//! `semaphore run`: holds one slot while a command runs (the CLI's README).
//!
//! The lease is short and kept alive (renewed every [`Timing::tell`],
//! every second with the defaults) while the command runs, and returned
//! the moment it exits. The command behaves as
//! it would without `semaphore`:
//!
//! - It runs in a process group apart from `semaphore run`'s (the
//!   guardian's, below), which gets the terminal when
//!   `semaphore run` is the foreground job ([`terminal`]): it reads the
//!   terminal, and Ctrl-C, Ctrl-\ and Ctrl-Z reach it.
//! - Ctrl-Z stops it, and `semaphore run` stops with it (the shell sees one
//!   job). When the job is continued (`fg`, `bg`, SIGCONT), `semaphore run`
//!   first renews the lease; only if that succeeds does the command go on.
//!   A lease lost meanwhile ends the command before it runs again (exit 70).
//! - INT, TERM, HUP, QUIT, USR1 and USR2 sent to `semaphore run` go to the
//!   command's group, followed by SIGCONT so that a stopped command acts on
//!   them.
//! - A guardian process ([`guard`]) ends the command's group the moment
//!   `semaphore run` dies, SIGKILL included, and then returns the lease
//!   itself; and it ends the command before the lease's local deadline
//!   when `semaphore run` cannot renew it or its session cannot
//!   heartbeat (stopped on its own, hung, the store out of reach): SIGTERM
//!   `--kill-after` before the deadline, SIGKILL at it.
//! - If the guardian itself ends while the command runs (someone killed
//!   it), `semaphore run` notices at once (its exit), ends the command
//!   as for a lost lease, returns the lease and exits 70: a command never
//!   runs on unguarded.
//! - If a renewal finds the lease lost, the command gets SIGTERM (once:
//!   from the guardian if its deadline came first, else from here, the
//!   guardian told to send none), then SIGKILL after `--kill-after`, and
//!   `semaphore run` exits 70. It exits 70 too when the guardian ended the
//!   command, whatever the command then exited with.
//! - The margin, the SIGTERM period and how often the guardian is told the
//!   deadline follow the lease's window, the shorter of its ttl and its
//!   session timeout ([`Timing`]); `--ttl` is at least
//!   [`MIN_TTL`](crate::cli::MIN_TTL). The lease is renewed, and the
//!   store's session heartbeated, as often as the guardian is told (every
//!   second at most), so that an outage of the store shorter than the
//!   bound in [`Timing`]'s docs (21.5 s with the defaults) ends nothing.

mod command;
mod devices;
pub(crate) mod guard;
pub(crate) mod guardian;
pub(crate) mod returner;
mod terminal;
mod timing;
mod waiting;

use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg, raise};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;
use semaphore_core::{Error, LeaseGuard, Pool};
use tokio::signal::unix::{SignalKind, signal};

use crate::cli::RunArgs;
use crate::exit::{Exit, code};
use crate::store::Choice;
use command::Cmd;
use devices::{check_devices, check_positions, distinct_devices};
use guard::Guard;
use terminal::Terminal;
use timing::Timing;

/// The session timeout `semaphore run` keeps its store's session with
/// unless `--session-timeout` says otherwise: long enough that a
/// heartbeat late by seconds leaves the command `--kill-after` (5 s by
/// default) before its lease's local deadline.
pub(crate) const SESSION_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) async fn run(
    args: RunArgs,
    pool: Pool,
    name: String,
    choice: Choice,
) -> Result<u8, Exit> {
    if let Some(devices) = &args.devices {
        distinct_devices(devices)?;
    }
    let cmd = Cmd::resolve(&args)?;
    let timing = Timing::of(args.ttl, choice.session_timeout(), args.kill_after)?;
    if let Some(count) = args.count {
        pool.register(count).await.map_err(Exit::from_store)?;
    }
    if let Some(devices) = &args.devices {
        check_devices(devices, &pool, args.count).await?;
    }
    let owner = waiting::owner(
        args.owner.as_deref(),
        &args.command[0],
        pool.limits().max_owner_len,
    );
    let options = semaphore_core::BorrowOptions::new()
        .slots(args.slots)
        .wait_while_draining(args.wait_while_draining)
        .owner(owner);
    let borrow = pool.borrow_owned_with(args.ttl, args.wait, options);
    let answer = waiting::waiting(&pool, &name, args.quiet, borrow).await;
    let answer = answer.map_err(|sig| {
        let waited = crate::shown::escaped(&name);
        Exit::new(
            128 + sig as u8,
            format!("{sig} while waiting for a slot of {waited}; no slot was held"),
        )
    })?;
    let mut lease = match answer {
        Ok(lease) => lease,
        Err(Error::Exhausted { waited, .. }) => {
            return Err(Exit::exhausted(&name, waited, args.exhausted_code));
        }
        Err(Error::PoolNotFound { .. }) if args.count.is_some() => {
            // Registered just before: the pool went while this run waited.
            return Err(Exit::new(
                code::UNAVAILABLE,
                format!(
                    "pool {} was removed while this run waited for a slot (deleted, or \
                     lost by the store: a Redis restart without persistence loses it); run \
                     again to register it anew",
                    crate::shown::escaped(&name)
                ),
            ));
        }
        Err(e) => return Err(Exit::from_store(e)),
    };
    if let Some(devices) = &args.devices {
        // The pool's count may have grown while this borrow waited: a
        // position past the list gets no device, and the command must not
        // run without one.
        if let Err(e) = check_positions(devices, &lease.positions) {
            let _ = lease.release().await;
            return Err(e);
        }
    }
    if !guard::confirmed(&lease).await {
        let _ = lease.release().await;
        return Err(Exit::new(
            code::LEASE_LOST,
            "the slot handed to this run was lost before its command started (the \
             store did not confirm it within its bound: out of reach or slow); run again",
        ));
    }
    // Renewed and heartbeated every `tell` rather than every third of the
    // window, so that the deadline the guardian holds runs from a
    // confirmation at most `tell` old: an outage up to the bound in
    // `Timing`'s docs ends nothing.
    lease.keep_alive_every(timing.tell);
    if let Some(session) = pool.store().session() {
        session.beat_every(timing.tell);
    }
    // Listening before the command starts: a stop or a signal that came
    // before would be missed.
    let signals = Signals::listen()?;
    let mut guard = Guard::start(
        timing.kill_after,
        timing.margin,
        &choice,
        pool.id(),
        lease.id,
    )
    .await
    .map_err(|e| {
        Exit::new(
            code::SOFTWARE,
            format!(
                "cannot start the guardian process (semaphore {}): {e}",
                guard::SUBCOMMAND
            ),
        )
    })?;
    // The guardian knows the deadline before the command exists: a wrapper
    // stopped right after starting it (Ctrl-Z) would otherwise leave the
    // command unguarded past the lease (seen in CI under load).
    guard.deadline(&lease);
    let child = match cmd.spawn(&lease, &name, args.devices.as_deref(), guard.group()) {
        Ok(child) => child,
        Err(e) => {
            guard.finish().await;
            let _ = lease.release().await;
            return Err(e);
        }
    };
    let mut job = Job::new(child, guard, args.ttl, timing);
    let status = job.supervise(&lease, signals).await;
    job.close().await;
    // The slot is held no longer than the lease's window from its last
    // renewal or heartbeat, which was at most a `tell` ago.
    let window = choice
        .session_timeout()
        .map_or(args.ttl, |session| session.min(args.ttl));
    if let Err(e) = lease.release().await {
        eprintln!(
            "semaphore run: the command ended, but its lease could not be returned ({}); \
             its slot stays taken until the store ends the lease by itself, within {} \
             (the shorter of --ttl and the session timeout)",
            e.chain(),
            humantime::format_duration(window)
        );
    }
    status
}

/// The signals `semaphore run` acts on while the command runs.
struct Signals {
    /// Sent on to the command's group.
    forwarded: Vec<(tokio::signal::unix::Signal, Signal)>,
    /// SIGCHLD: the command may have stopped.
    children: tokio::signal::unix::Signal,
}

impl Signals {
    fn listen() -> Result<Self, Exit> {
        let software =
            |e: std::io::Error| Exit::new(code::SOFTWARE, format!("signal handler: {e}"));
        let mut forwarded = Vec::new();
        for (kind, sig) in [
            (SignalKind::interrupt(), Signal::SIGINT),
            (SignalKind::terminate(), Signal::SIGTERM),
            (SignalKind::hangup(), Signal::SIGHUP),
            (SignalKind::quit(), Signal::SIGQUIT),
            (SignalKind::user_defined1(), Signal::SIGUSR1),
            (SignalKind::user_defined2(), Signal::SIGUSR2),
        ] {
            forwarded.push((signal(kind).map_err(software)?, sig));
        }
        let children = signal(SignalKind::child()).map_err(software)?;
        Ok(Self {
            forwarded,
            children,
        })
    }
}

/// The running command, its group, the guardian, and the terminal.
struct Job {
    child: tokio::process::Child,
    /// The command's pid.
    pid: Pid,
    /// The command's process group: the guardian's.
    group: Pid,
    guard: Guard,
    terminal: Option<Terminal>,
    ttl: Duration,
    timing: Timing,
}

impl Job {
    fn new(child: tokio::process::Child, guard: Guard, ttl: Duration, timing: Timing) -> Self {
        // The pid is there until the child is waited for.
        let pid = Pid::from_raw(child.id().map_or(0, |id| id as i32));
        let group = guard.group();
        let terminal = Terminal::open();
        if let Some(terminal) = terminal.as_ref().filter(|t| t.ours()) {
            terminal.give(group);
        }
        Self {
            child,
            pid,
            group,
            guard,
            terminal,
            ttl,
            timing,
        }
    }

    /// Waits for the command, forwarding signals, following its stops, and
    /// ending it if the lease is lost; the exit code to leave with.
    async fn supervise(&mut self, lease: &LeaseGuard<Pool>, signals: Signals) -> Result<u8, Exit> {
        let Signals {
            mut forwarded,
            mut children,
        } = signals;
        if let Some(sig) = self.stopped()
            && let Err(reason) = self.stop_with(sig, lease).await
        {
            return self.end(&reason).await;
        }
        let mut tell_guard = tokio::time::interval(self.timing.tell);
        let lost = lease.lost();
        tokio::pin!(lost);
        let unguarded = self.guard.gone();
        tokio::pin!(unguarded);
        loop {
            tokio::select! {
                status = self.child.wait() => {
                    let status = status.map_err(|e| {
                        Exit::new(code::SOFTWARE, format!("waiting for the command: {e}"))
                    })?;
                    if self.guard.acted() {
                        // Ended by the guardian (it says so before it
                        // signals), whatever the command made of it.
                        return Err(Exit::new(
                            code::LEASE_LOST,
                            "the lease could not be confirmed in time; the guardian ended \
                             the command",
                        ));
                    }
                    if lease.is_lost() || !lease.is_held() {
                        // Ran on past the lease.
                        return Err(lease_lost());
                    }
                    return Ok(exit_code(status));
                }
                sig = any(&mut forwarded) => {
                    let _ = killpg(self.group, sig);
                    let _ = killpg(self.group, Signal::SIGCONT);
                }
                _ = children.recv() => {
                    if let Some(sig) = self.stopped()
                        && let Err(reason) = self.stop_with(sig, lease).await
                    {
                        return self.end(&reason).await;
                    }
                }
                reason = &mut lost => return self.end(&reason).await,
                () = &mut unguarded => return self.unguarded().await,
                _ = tell_guard.tick() => self.guard.deadline(lease),
            }
        }
    }

    /// The signal that stopped the command, if it is stopped.
    fn stopped(&self) -> Option<Signal> {
        match waitid(
            Id::Pid(self.pid),
            WaitPidFlag::WSTOPPED | WaitPidFlag::WNOHANG,
        ) {
            Ok(WaitStatus::Stopped(_, sig)) => Some(sig),
            _ => None,
        }
    }

    /// The command stopped on `sig`: stops this process too, so that the
    /// shell sees the job stopped, then, once continued, renews the lease
    /// and only then continues the command. `Err` if the lease is gone.
    async fn stop_with(&mut self, sig: Signal, lease: &LeaseGuard<Pool>) -> Result<(), Arc<Error>> {
        let terminal = self.terminal.as_ref();
        if matches!(sig, Signal::SIGTTIN | Signal::SIGTTOU)
            && terminal.is_some_and(|t| t.foreground() == Some(self.group))
        {
            // It touched the terminal before it was handed over: go on.
            let _ = killpg(self.group, Signal::SIGCONT);
            return Ok(());
        }
        if sig != Signal::SIGSTOP && terminal::orphaned() {
            // No shell will ever continue this job, and the kernel discards
            // these stops in an orphaned group: a command run on its own
            // here would not stop on Ctrl-Z, and would get EIO rather than
            // stop when it touches the terminal.
            if sig == Signal::SIGTSTP {
                let _ = killpg(self.group, Signal::SIGCONT);
                return Ok(());
            }
            eprintln!(
                "semaphore run: the command stopped to use the terminal, which this orphaned \
                 background job cannot have; hanging it up"
            );
            let _ = killpg(self.group, Signal::SIGHUP);
            let _ = killpg(self.group, Signal::SIGCONT);
            return Ok(());
        }
        if let Some(terminal) = terminal {
            terminal.take_back(self.group);
        }
        // Stops here until continued.
        let _ = raise(sig);
        confirm(lease, self.ttl).await?;
        if let Some(terminal) = self.terminal.as_ref().filter(|t| t.ours()) {
            terminal.give(self.group);
        }
        self.guard.deadline(lease);
        let _ = killpg(self.group, Signal::SIGCONT);
        Ok(())
    }

    /// Ends the command after the lease was lost: SIGTERM (and SIGCONT, so
    /// that a stopped command acts on it), SIGKILL after `--kill-after`.
    /// The guardian is told first and sends no SIGTERM of its own; if it
    /// already sent one (its deadline came first), none goes from here.
    async fn end(&mut self, reason: &Error) -> Result<u8, Exit> {
        eprintln!(
            "semaphore run: the lease was lost ({}); stopping the command",
            reason.chain()
        );
        let kill_after = self.timing.kill_after;
        if self.guard.end(kill_after).await {
            let _ = killpg(self.group, Signal::SIGTERM);
            let _ = killpg(self.group, Signal::SIGCONT);
        }
        if tokio::time::timeout(kill_after, self.child.wait())
            .await
            .is_err()
        {
            let _ = killpg(self.group, Signal::SIGKILL);
            let _ = self.child.wait().await;
        }
        Err(lease_lost())
    }

    /// The guardian exited while the command ran. If it ended the command's
    /// group itself (it says so first), that is the lease's end, as for a
    /// command the guardian ended. Otherwise it was killed: the command
    /// must not run on unguarded (a later SIGKILL or SIGSTOP of this
    /// process would leave it running beside the slot's next holder), so
    /// it is ended as for a lost lease (SIGTERM, SIGKILL after
    /// `--kill-after`), and the lease is then returned (rule "`run` fails
    /// safe on its guardian's end").
    async fn unguarded(&mut self) -> Result<u8, Exit> {
        let acted = self.guard.acted();
        if !acted {
            eprintln!(
                "semaphore run: the guardian process (pid {}) ended while the command ran; \
                 stopping the command, which must not run unguarded (SIGTERM now, SIGKILL \
                 after {} ms), then returning the lease",
                self.group,
                self.timing.kill_after.as_millis()
            );
            let _ = killpg(self.group, Signal::SIGTERM);
            let _ = killpg(self.group, Signal::SIGCONT);
        }
        if tokio::time::timeout(self.timing.kill_after, self.child.wait())
            .await
            .is_err()
        {
            let _ = killpg(self.group, Signal::SIGKILL);
            let _ = self.child.wait().await;
        }
        Err(Exit::new(
            code::SOFTWARE,
            if acted {
                "the lease could not be confirmed in time; the guardian ended the command"
            } else {
                "the guardian process ended while the command ran; the command was stopped \
                 and the lease returned"
            },
        ))
    }

    /// Takes the terminal back and lets the guardian go.
    async fn close(self) {
        if let Some(terminal) = &self.terminal {
            terminal.take_back(self.group);
        }
        self.guard.finish().await;
    }
}

fn lease_lost() -> Exit {
    Exit::new(code::LEASE_LOST, "the lease was lost while the command ran")
}

/// Renews the lease after a stop: `Err` with the reason if it is gone.
async fn confirm(lease: &LeaseGuard<Pool>, ttl: Duration) -> Result<(), Arc<Error>> {
    if lease.is_lost() {
        return Err(lease.lost().await);
    }
    if lease.time_left().is_zero() {
        // Renewed since the grant: its end is not the grant's expiry, and
        // it has passed by now.
        return Err(Arc::new(Error::LeaseExpired {
            pool: lease.pool().id(),
            lease: lease.id,
            expired_at: lease.pool().store().clock().now(),
        }));
    }
    tokio::select! {
        renewed = lease.pool().renew(lease.lease(), ttl) => renewed.map(|_| ()).map_err(Arc::new),
        reason = lease.lost() => Err(reason),
    }
}

/// The next signal on any of `streams`.
async fn any(streams: &mut [(tokio::signal::unix::Signal, Signal)]) -> Signal {
    std::future::poll_fn(|cx| {
        for (stream, sig) in streams.iter_mut() {
            if stream.poll_recv(cx).is_ready() {
                return std::task::Poll::Ready(*sig);
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// The command's own code, or 128+N if signal N killed it.
fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(255),
        _ => 1,
    }
}
