//! The returner (`semaphore __return`): started by a guardian whose
//! wrapper died, it waits until no process of the command's group runs and
//! then returns the lease, so that the slot comes back at once (see
//! [`super::guard`]'s docs).

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use nix::sys::signal::killpg;
use nix::unistd::Pid;
use semaphore_core::{LeaseId, PoolId};

use super::guard::*;
use crate::store::Choice;

/// Starts the returner in a process group of its own (the guardian's,
/// about to be killed, is the command's) and tells it the group, the store
/// and the lease on its standard input. A returner that cannot start
/// leaves the lease to end by itself.
pub(super) fn start_returner(store: &Choice, pool: PoolId, lease: LeaseId, group: Pid) {
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let mut returner = std::process::Command::new(exe);
    std::os::unix::process::CommandExt::process_group(&mut returner, 0);
    returner
        .arg(RETURNER)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null());
    let Ok(mut child) = returner.spawn() else {
        return;
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = write!(
            stdin,
            "group {}\nstore {}\nlease {pool} {lease}\n",
            group.as_raw(),
            store.to_line()
        );
    }
}

/// The returner's own `main`: reads the group, the store and the lease,
/// waits until no process of the group runs (bounded by [`GONE_WAIT`]),
/// then returns the lease. Its exit code.
pub(crate) fn returner_main() -> u8 {
    let mut input = String::new();
    if std::io::stdin().read_to_string(&mut input).is_err() {
        return 1;
    }
    let (mut group, mut store, mut lease) = (None, None, None);
    for line in input.lines() {
        match line.split_once(' ') {
            Some(("group", g)) => group = g.parse::<i32>().ok().map(Pid::from_raw),
            Some(("store", s)) => store = Choice::from_line(s),
            Some(("lease", ids)) => {
                lease = ids.split_once(' ').and_then(|(pool, lease)| {
                    Some((pool.parse::<PoolId>().ok()?, lease.parse::<LeaseId>().ok()?))
                });
            }
            _ => {}
        }
    }
    let (Some(group), Some(store), Some((pool, lease))) = (group, store, lease) else {
        return 1;
    };
    let until = Instant::now() + GONE_WAIT;
    while runs_in(group) {
        if Instant::now() >= until {
            let _ = writeln!(
                std::io::stderr(),
                "semaphore run: the wrapper died and its command would not end; \
                 its lease is left to end by itself"
            );
            return 1;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    return_lease(&store, pool, lease);
    0
}

/// Whether a process that is not a zombie is in process group `group`.
fn runs_in(group: Pid) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        // No /proc to look in: a signal that reaches no one says so.
        return killpg(group, None).is_ok();
    };
    entries.flatten().any(|entry| {
        let name = entry.file_name();
        if !name
            .to_str()
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        {
            return false;
        }
        // After the parenthesized name (which may hold spaces), the state
        // and, two fields on, the process group. A zombie runs no more.
        std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|stat| {
                let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
                let state = fields.next()?;
                let pgrp = fields.nth(1)?.parse::<i32>().ok()?;
                Some(state != "Z" && pgrp == group.as_raw())
            })
            .unwrap_or(false)
    })
}

/// Returns `lease` of `pool` on `store` once the wrapper is gone, on a
/// runtime of its own, bounded by [`RETURN_WAIT`]. A failure is left to
/// the lease's own end (its session's or its ttl).
fn return_lease(store: &Choice, pool: PoolId, lease: LeaseId) {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    runtime.block_on(async {
        let returned = tokio::time::timeout(RETURN_WAIT, async {
            let store = store.open(Some(1)).await?;
            store.return_lease(pool, lease).await
        })
        .await;
        let _ = writeln!(
            std::io::stderr(),
            "semaphore run: the wrapper died; {}",
            match returned {
                Ok(Ok(true)) => "its command was killed and its lease returned".to_string(),
                Ok(Ok(false)) => "its command was killed; its lease had ended".to_string(),
                Ok(Err(e)) => format!("its command was killed; returning its lease failed: {e}"),
                Err(_) => "its command was killed; returning its lease timed out".to_string(),
            }
        );
    });
}
