//! Cross-process wake-up (SPEC "SQLite store"): a waiter in this process
//! learns of a commit by another process from a file-change notification
//! on the database's WAL, with a fallback poll.
//!
//! A notification can arrive a moment before the commit is visible to
//! readers, so waiters are told at each notification and once more when the
//! file has been quiet for a moment. Every
//! telling makes the head of each queue re-check the store; nothing here
//! trusts one look.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use notify::{Event, RecommendedWatcher, RecursiveMode, Watcher as _};
use semaphore_core::Changes;

/// How long the file must be quiet after a notification before the second
/// telling.
const SETTLE: Duration = Duration::from_micros(500);

/// Watches a database file; stops when dropped.
pub(crate) struct Watcher {
    _watcher: Option<RecommendedWatcher>,
    _stop: mpsc::Sender<()>,
}

/// Starts watching the directory of `db` for changes to `db` and its WAL,
/// telling `changes` of each, and of nothing at least every `poll`.
/// Where the platform gives no notifications, only the poll remains.
pub(crate) fn watch(db: &Path, changes: Arc<Changes>, poll: Duration) -> Watcher {
    let (tx, rx) = mpsc::channel::<()>();
    let names: Vec<PathBuf> = ["", "-wal"]
        .iter()
        .filter_map(|suffix| {
            let mut name = db.file_name()?.to_os_string();
            name.push(suffix);
            Some(PathBuf::from(name))
        })
        .collect();
    let events = tx.clone();
    let watcher = db.parent().and_then(|dir| {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        let mut watcher = notify::recommended_watcher(move |event: notify::Result<Event>| {
            let Ok(event) = event else { return };
            let ours = event
                .paths
                .iter()
                .any(|p| p.file_name().is_some_and(|n| names.iter().any(|m| m == n)));
            if ours && (event.kind.is_modify() || event.kind.is_create()) {
                let _ = events.send(());
            }
        })
        .ok()?;
        watcher.watch(dir, RecursiveMode::NonRecursive).ok()?;
        Some(watcher)
    });
    std::thread::Builder::new()
        .name("semaphore-sqlite-watch".into())
        .spawn(move || run(&rx, &changes, poll))
        .expect("spawning the file watch thread");
    Watcher {
        _watcher: watcher,
        _stop: tx,
    }
}

fn run(rx: &mpsc::Receiver<()>, changes: &Changes, poll: Duration) {
    loop {
        match rx.recv_timeout(poll) {
            Ok(()) => {
                changes.notify_all();
                loop {
                    match rx.recv_timeout(SETTLE) {
                        Ok(()) => changes.notify_all(),
                        Err(RecvTimeoutError::Timeout) => break,
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
                changes.notify_all();
            }
            Err(RecvTimeoutError::Timeout) => changes.notify_all(),
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}
