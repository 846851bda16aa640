//! The controlling terminal, handed to the command as a job-control shell
//! hands it to a job.
//!
//! The command runs in a process group of its own, so that it and every
//! process it starts can be signalled and ended together. When `semaphore
//! run` is the terminal's foreground job, it makes the command's group the
//! foreground group: the command reads the terminal, and Ctrl-C, Ctrl-\ and
//! Ctrl-Z reach it directly, as they would if it ran without `semaphore`.
//! The terminal is taken back when the command stops or ends.
//!
//! A process in the background that sets the foreground group gets SIGTTOU
//! unless it blocks it; the calls here block it for their thread around
//! the call only.

use std::fs::File;

use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};
use nix::unistd::{Pid, getpgrp, tcgetpgrp, tcsetpgrp};

/// This process's controlling terminal, if it has one.
#[derive(Debug)]
pub(crate) struct Terminal {
    tty: File,
}

impl Terminal {
    /// The controlling terminal (`/dev/tty`), or `None` without one.
    pub(crate) fn open() -> Option<Self> {
        let tty = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/tty")
            .ok()?;
        Some(Self { tty })
    }

    /// The terminal's foreground process group.
    pub(crate) fn foreground(&self) -> Option<Pid> {
        tcgetpgrp(&self.tty).ok()
    }

    /// Whether this process's group is the foreground one.
    pub(crate) fn ours(&self) -> bool {
        self.foreground() == Some(getpgrp())
    }

    /// Makes `group` the foreground group.
    pub(crate) fn give(&self, group: Pid) {
        let _ = without_sigttou(|| tcsetpgrp(&self.tty, group));
    }

    /// Makes this process's group the foreground one again, if `group` has
    /// it (a shell that took it meanwhile keeps it).
    pub(crate) fn take_back(&self, group: Pid) {
        if self.foreground() == Some(group) {
            let _ = without_sigttou(|| tcsetpgrp(&self.tty, getpgrp()));
        }
    }
}

/// Whether this process's group is orphaned (POSIX): no member has a
/// parent in another group of the same session, so no job-control shell
/// will continue it, and the kernel discards the stop signals SIGTSTP,
/// SIGTTIN and SIGTTOU sent to it. Read once from `/proc`; `false` where
/// that cannot be read.
pub(crate) fn orphaned() -> bool {
    let (group, session) = (
        getpgrp().as_raw(),
        nix::unistd::getsid(None).map_or(0, |s| s.as_raw()),
    );
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    let stat = |pid: i32| -> Option<(i32, i32, i32)> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let mut fields = text.rsplit_once(") ")?.1.split(' ').skip(1);
        let ppid = fields.next()?.parse().ok()?;
        let pgrp = fields.next()?.parse().ok()?;
        let sid = fields.next()?.parse().ok()?;
        Some((ppid, pgrp, sid))
    };
    let members = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| stat(pid).map(|s| (pid, s)))
        .filter(|(_, (_, pgrp, _))| *pgrp == group);
    let mut any = false;
    for (_, (ppid, _, _)) in members {
        any = true;
        if let Some((_, parent_group, parent_session)) = stat(ppid)
            && parent_group != group
            && parent_session == session
        {
            return false;
        }
    }
    any
}

/// Runs `f` with SIGTTOU blocked on this thread.
fn without_sigttou<T>(f: impl FnOnce() -> T) -> T {
    let mut set = SigSet::empty();
    set.add(Signal::SIGTTOU);
    let mut old = SigSet::empty();
    let blocked = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&set), Some(&mut old)).is_ok();
    let out = f();
    if blocked {
        let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    }
    out
}
