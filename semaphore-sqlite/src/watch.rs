//! Cross-process wake-up (SPEC "SQLite store"): a waiter in this process
//! learns of a commit by another process from a file-change notification
//! on the database's WAL, with a fallback poll.
//!
//! The file is watched only while this process has waiters: every commit
//! makes several writes, and watching them all the time costs every borrow
//! (measured: 81 µs per borrow + return unwatched, 140-156 µs watched). The
//! store arms the watch when a queued head asks it, before its check runs,
//! so a commit after that check is always seen; the watch is disarmed once
//! no one has waited for a poll interval.
//!
//! A notification can arrive a moment before the commit is visible to
//! readers, so waiters are told at each notification and once more when the
//! file has been quiet for a moment. Every telling makes the head of each
//! queue re-check the store; nothing here trusts one look.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use notify::{Event, RecommendedWatcher, RecursiveMode, Watcher as _};
use parking_lot::Mutex;
use semaphore_core::Changes;

/// How long the file must be quiet after a notification before the second
/// telling.
const SETTLE: Duration = Duration::from_micros(500);

/// Watches a database file while armed; stops for good when dropped.
pub(crate) struct Watcher {
    state: Arc<State>,
    _stop: mpsc::Sender<()>,
}

struct State {
    dir: PathBuf,
    watcher: Mutex<Option<RecommendedWatcher>>,
    armed: AtomicBool,
}

impl State {
    fn set_armed(&self, armed: bool) {
        let mut watcher = self.watcher.lock();
        if self.armed.load(Ordering::Acquire) == armed {
            return;
        }
        if let Some(w) = watcher.as_mut() {
            let done = if armed {
                w.watch(&self.dir, RecursiveMode::NonRecursive)
            } else {
                w.unwatch(&self.dir)
            };
            // A platform that cannot watch leaves only the fallback poll.
            drop(done);
        }
        self.armed.store(armed, Ordering::Release);
    }
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watcher")
            .field("dir", &self.state.dir)
            .field("armed", &self.state.armed.load(Ordering::Relaxed))
            .finish()
    }
}

impl Watcher {
    /// Makes sure the file is watched; cheap when it already is.
    pub(crate) fn arm(&self) {
        if !self.state.armed.load(Ordering::Acquire) {
            self.state.set_armed(true);
        }
    }
}

/// Prepares a watch on the directory of `db` for changes to `db` and its
/// WAL, telling `changes` of each, and telling it of nothing at least every
/// `poll`. The watch starts disarmed.
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
    let dir = match db.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let events = tx.clone();
    let watcher = notify::recommended_watcher(move |event: notify::Result<Event>| {
        let Ok(event) = event else { return };
        let ours = event
            .paths
            .iter()
            .any(|p| p.file_name().is_some_and(|n| names.iter().any(|m| m == n)));
        if ours && (event.kind.is_modify() || event.kind.is_create()) {
            let _ = events.send(());
        }
    })
    .ok();
    let state = Arc::new(State {
        dir,
        watcher: Mutex::new(watcher),
        armed: AtomicBool::new(false),
    });
    let thread_state = state.clone();
    std::thread::Builder::new()
        .name("semaphore-sqlite-watch".into())
        .spawn(move || run(&rx, &changes, &thread_state, poll))
        .expect("spawning the file watch thread");
    Watcher { state, _stop: tx }
}

fn run(rx: &mpsc::Receiver<()>, changes: &Changes, state: &State, poll: Duration) {
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
            Err(RecvTimeoutError::Timeout) => {
                if changes.has_waiters() {
                    changes.notify_all();
                } else {
                    state.set_armed(false);
                }
            }
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}
