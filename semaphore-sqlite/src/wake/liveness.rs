//! Whether the process behind a queued head still runs, so that a
//! dead one holds back no one.
//!
//! Each head's row in `semaphore_waiters` records its process id and pid
//! namespace. A head that finds others queued ahead of it drops those whose
//! process is gone, so that a process killed while waiting (SIGKILL, a
//! crash) holds the queue up for no longer than it takes the next borrower
//! to look, not for the row's whole `WAITER_TTL`. Measured with the process
//! torture test (8 processes on 3 slots, one killed every 150-450 ms, 6 s):
//! 15 holds before, when dead heads stalled everyone for up to 3 s.
//!
//! Only Linux can tell (from `/proc`); elsewhere, and for rows written in
//! another pid namespace (another container sharing the file), a row is
//! only ever aged out by its `WAITER_TTL`.

use std::sync::OnceLock;

/// This process: its id and its pid namespace (empty when unknown).
pub(crate) struct Me {
    pub(crate) pid: i64,
    pub(crate) namespace: String,
}

pub(crate) fn me() -> &'static Me {
    static ME: OnceLock<Me> = OnceLock::new();
    ME.get_or_init(|| Me {
        pid: i64::from(std::process::id()),
        namespace: namespace(),
    })
}

#[cfg(target_os = "linux")]
fn namespace() -> String {
    std::fs::read_link("/proc/self/ns/pid")
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

#[cfg(not(target_os = "linux"))]
fn namespace() -> String {
    String::new()
}

/// Whether process `pid` of pid namespace `namespace` is known to have
/// ended. `false` whenever this process cannot tell.
pub(crate) fn is_gone(pid: Option<i64>, namespace: Option<&str>) -> bool {
    let me = me();
    match (pid, namespace) {
        (Some(pid), Some(ns)) if !me.namespace.is_empty() && ns == me.namespace => {
            pid != me.pid && !std::path::Path::new(&format!("/proc/{pid}")).exists()
        }
        _ => false,
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn this_process_runs_and_an_ended_one_is_gone() {
        let me = me();
        assert!(!is_gone(Some(me.pid), Some(&me.namespace)));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = i64::from(child.id());
        child.wait().unwrap();
        assert!(is_gone(Some(pid), Some(&me.namespace)));
        assert!(!is_gone(Some(pid), Some("pid:[another namespace]")));
        assert!(!is_gone(None, None));
    }
}
