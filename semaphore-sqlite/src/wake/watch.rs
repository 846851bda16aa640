//! Cross-process wake-up (rule "Stores"), behind the rings of
//! [`doorbell`](crate::wake::doorbell): a waiter in this process learns of a
//! commit by another process from a file-change notification on the
//! database's WAL, with a fallback poll.
//!
//! The file is watched only while this process has waiters: every commit
//! makes several writes, and watching them all the time costs every borrow
//! (measured: 81 µs per borrow + return unwatched, 140-156 µs watched). The
//! store arms the watch when a queued head asks it, before its check runs,
//! so a commit after that check is always seen; the watch is disarmed once
//! no one has waited for a poll interval. Where other processes ring this
//! one (Linux), the watch also rests through a burst of commits, this
//! process's own included: the thread looks at SQLite's data version each
//! `SETTLE` instead ([`quiet`](super::quiet)), and watches again once the
//! burst ends.
//!
//! A notification can arrive a moment before the commit is visible to
//! readers, so waiters are told at each notification and once more when the
//! file has been quiet for a moment; where other processes ring this one,
//! only once the file is quiet. Every telling makes the head of each queue
//! re-check the store; nothing here trusts one look.
//!
//! Dropping the [`Watcher`] ends its thread and the notifier's, and closes
//! the notifier's descriptors. If the platform cannot watch (the inotify
//! limits of the user are reached, say), the store falls back to the poll,
//! logs a `tracing` warning and says so in [`WakeUp`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;

use semaphore_core::store::ForkCheck;
use std::time::Duration;

use notify::{Event, RecommendedWatcher, RecursiveMode, Watcher as _};
use parking_lot::Mutex;
use semaphore_core::store::Changes;

use super::quiet::DataVersion;

/// How long the file must be quiet after a notification before the second
/// telling.
const SETTLE: Duration = Duration::from_micros(500);

/// How a waiter in this process learns of another process's commit when
/// that process does not ring it, as reported by
/// [`SqliteStore::wake_up`](crate::SqliteStore::wake_up).
///
/// On Linux, a process of this version rings the processes whose heads
/// wait on a pool right after each commit that can let one in; the file
/// watch then tells only once the file is quiet, for the commits no ring
/// follows (a caller-owned transaction, a process of an older version).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WakeUp {
    /// A file-change notification on the WAL (inotify on Linux), within
    /// milliseconds, backed by the poll.
    FileWatch {
        /// The fallback poll's interval.
        poll: Duration,
    },
    /// The fallback poll alone: a waiter learns of another process's
    /// commit within `poll`. Returns and count raises made through this
    /// store handle still wake its waiters at once.
    Poll {
        /// The poll's interval.
        poll: Duration,
        /// Why the file could not be watched, as the platform said it
        /// (for inotify, raise `fs.inotify.max_user_instances` or
        /// `max_user_watches`).
        reason: String,
    },
}

/// Watches a database file while armed; stops for good when dropped.
pub(crate) struct Watcher {
    state: Arc<State>,
    tx: mpsc::Sender<Msg>,
    thread: Option<JoinHandle<()>>,
    /// The process that started it: see [`Drop`](#impl-Drop-for-Watcher).
    process: ForkCheck,
}

enum Msg {
    Changed,
    Stop,
}

struct State {
    dir: PathBuf,
    poll: Duration,
    watcher: Mutex<Option<RecommendedWatcher>>,
    /// Why the file is not watched, once it failed.
    failed: Mutex<Option<String>>,
    armed: AtomicBool,
    /// Set while the watch thread rests the watch during a burst of
    /// commits; changed under `watcher`'s lock.
    resting: AtomicBool,
    /// The changes seen, and whether the watch thread was told of them and
    /// will look again before it rests ([`Burst`]).
    burst: Burst,
}

/// A burst of changes told to the watch thread once: a commit makes
/// several writes, each a notification, and one message (one wake-up of
/// the thread) for each cost a busy process half its borrows' time
/// (measured: 16 tasks on a hot pool, 104-121 µs a pair, 63 µs unwatched).
/// The notifier counts every change and sends a message only when the
/// thread was not told yet; the thread then looks at the count each
/// `SETTLE` until it stops moving, and only then rests.
#[derive(Default)]
struct Burst {
    changes: AtomicU64,
    told: AtomicBool,
}

impl Burst {
    /// Counts a change; `true` if the thread must be told of it.
    fn change(&self) -> bool {
        self.changes.fetch_add(1, Ordering::AcqRel);
        !self.told.swap(true, Ordering::AcqRel)
    }

    /// The changes counted so far.
    fn count(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    /// Ends a burst whose last look counted `seen`: `false` if a change
    /// came after that look and its notifier did not tell (it found the
    /// thread told): the burst goes on.
    fn end(&self, seen: u64) -> bool {
        self.told.store(false, Ordering::Release);
        self.count() == seen || self.told.swap(true, Ordering::AcqRel)
    }
}

impl State {
    /// Arms or disarms the watch (the store wants it while it has
    /// waiters); a resting watch is left to its rest's end.
    fn set_armed(&self, armed: bool) {
        let mut watcher = self.watcher.lock();
        if self.armed.load(Ordering::Acquire) == armed {
            return;
        }
        if !self.resting.load(Ordering::Acquire) {
            self.apply(&mut watcher, armed);
        }
        self.armed.store(armed, Ordering::Release);
    }

    /// Rests the watch of an armed store during a burst of commits, or
    /// ends the rest ([`run`]).
    fn rest(&self, resting: bool) {
        let mut watcher = self.watcher.lock();
        if self.resting.load(Ordering::Acquire) == resting {
            return;
        }
        if self.armed.load(Ordering::Acquire) {
            self.apply(&mut watcher, !resting);
        }
        self.resting.store(resting, Ordering::Release);
    }

    /// Watches the directory, or stops; a watch that cannot be made ends
    /// the watching for good (the poll goes on).
    fn apply(&self, watcher: &mut Option<RecommendedWatcher>, watching: bool) {
        if let Some(w) = watcher.as_mut() {
            let done = if watching {
                w.watch(&self.dir, RecursiveMode::NonRecursive)
            } else {
                w.unwatch(&self.dir)
            };
            if let (true, Err(e)) = (watching, done) {
                self.fail(format!("watching {}: {e}", self.dir.display()));
                *watcher = None;
            }
        }
    }

    fn fail(&self, reason: String) {
        tracing::warn!(
            %reason,
            poll = ?self.poll,
            "semaphore-sqlite: cannot watch the database file; waiters learn of other processes' returns by polling only"
        );
        *self.failed.lock() = Some(reason);
    }
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watcher")
            .field("dir", &self.state.dir)
            .field("wake_up", &self.wake_up())
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

    /// The wake-up in force.
    pub(crate) fn wake_up(&self) -> WakeUp {
        let poll = self.state.poll;
        match self.state.failed.lock().clone() {
            None => WakeUp::FileWatch { poll },
            Some(reason) => WakeUp::Poll { poll, reason },
        }
    }
}

impl Drop for Watcher {
    /// Ends the notifier (its thread and descriptors) and the watch thread,
    /// and waits for the watch thread to finish. In a child that `fork()`
    /// made of the process that started them, nothing: those threads are
    /// the parent's (joining one here would wait forever), and the
    /// notifier's descriptors too (ending it would end the parent's).
    fn drop(&mut self) {
        if self.process.check("close").is_err() {
            std::mem::forget(self.state.watcher.lock().take());
            std::mem::forget(self.thread.take());
            return;
        }
        drop(self.state.watcher.lock().take());
        let _ = self.tx.send(Msg::Stop);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Prepares a watch on the directory of `db` for changes to `db` and its
/// WAL, telling `changes` of each, and telling it of nothing at least every
/// `poll`. The watch starts disarmed. Without `fallback` (test mode) it
/// neither watches nor polls. With `rung` (other processes ring this one
/// after their commits, see [`doorbell`](crate::wake::doorbell)), it tells of a
/// change only once the file settles: a telling at the first write would
/// send heads to look before the commit is visible, and their looks would
/// hold up the write lock when the ring comes (measured: line 5 p50 285-378
/// µs telling at once, 167-253 µs with rings alone).
///
/// # Errors
/// If the watch thread cannot be started.
pub(crate) fn watch(
    db: &Path,
    changes: Arc<Changes>,
    poll: Duration,
    fallback: bool,
    rung: bool,
) -> std::io::Result<Watcher> {
    let (tx, rx) = mpsc::channel::<Msg>();
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
    let state = Arc::new(State {
        dir,
        poll,
        watcher: Mutex::new(None),
        failed: Mutex::new(None),
        armed: AtomicBool::new(false),
        resting: AtomicBool::new(false),
        burst: Burst::default(),
    });
    let notified = state.clone();
    let watcher = notify::recommended_watcher(move |event: notify::Result<Event>| {
        let Ok(event) = event else { return };
        let ours = event
            .paths
            .iter()
            .any(|p| p.file_name().is_some_and(|n| names.iter().any(|m| m == n)));
        if ours && (event.kind.is_modify() || event.kind.is_create()) && notified.burst.change() {
            let _ = events.send(Msg::Changed);
        }
    });
    match watcher {
        Ok(_) if !fallback => *state.failed.lock() = Some("test mode: rings only".into()),
        Ok(watcher) => *state.watcher.lock() = Some(watcher),
        Err(e) => state.fail(format!("starting a file watcher: {e}")),
    }
    let thread_state = state.clone();
    let db = db.to_path_buf();
    let thread = std::thread::Builder::new()
        .name("semaphore-sqlite-watch".into())
        .spawn(move || {
            // Only where other processes ring: there the watch tells only
            // once the file settles, which a look each `SETTLE` tells as well.
            let version = rung.then(|| DataVersion::open(&db)).flatten();
            run(
                &rx,
                &changes,
                &thread_state,
                poll,
                fallback,
                rung,
                version.as_ref(),
            );
        })?;
    Ok(Watcher {
        process: ForkCheck::here(),
        state,
        tx,
        thread: Some(thread),
    })
}

fn run(
    rx: &mpsc::Receiver<Msg>,
    changes: &Changes,
    state: &State,
    poll: Duration,
    polls: bool,
    rung: bool,
    version: Option<&DataVersion>,
) {
    loop {
        match rx.recv_timeout(poll) {
            Ok(Msg::Changed) => {
                let settled = match version {
                    Some(version) => rest_through_burst(rx, state, version),
                    None => watch_through_burst(rx, changes, state, rung),
                };
                if !settled {
                    return;
                }
                changes.notify_all();
            }
            Err(RecvTimeoutError::Timeout) => {
                if polls && changes.has_waiters() {
                    changes.notify_all();
                } else {
                    state.set_armed(false);
                }
            }
            Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Watches through a burst of changes until a `SETTLE` passes with none,
/// telling at each look that saw one unless other processes ring: the
/// burst's later changes send nothing, they are counted ([`Burst`]).
/// `false` if the watch stops.
fn watch_through_burst(
    rx: &mpsc::Receiver<Msg>,
    changes: &Changes,
    state: &State,
    rung: bool,
) -> bool {
    if !rung {
        changes.notify_all();
    }
    let mut seen = state.burst.count();
    loop {
        match rx.recv_timeout(SETTLE) {
            Ok(Msg::Changed) | Err(RecvTimeoutError::Timeout) => {}
            Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => return false,
        }
        if state.burst.count() == seen && state.burst.end(seen) {
            return true;
        }
        if !rung {
            changes.notify_all();
        }
        seen = state.burst.count();
    }
}

/// Rests the watch through a burst of commits (none of its commits wakes
/// this thread: each woke it once, a busy process's largest cost), looking
/// at the data version each `SETTLE` instead, until a `SETTLE` passes with
/// no commit. The watch is back before the last look, so a commit after it
/// is notified and one before it shows in the version: nothing is missed.
/// `false` if the watch stops.
fn rest_through_burst(rx: &mpsc::Receiver<Msg>, state: &State, version: &DataVersion) -> bool {
    state.rest(true);
    let mut last = version.read();
    loop {
        match rx.recv_timeout(SETTLE) {
            Ok(Msg::Changed) | Err(RecvTimeoutError::Timeout) => {}
            Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => {
                state.rest(false);
                return false;
            }
        }
        let now = version.read();
        if now.is_none() || now == last {
            // Quiet (or the version cannot be read: the watch alone, then).
            state.burst.told.store(false, Ordering::Release);
            state.rest(false);
            let after = version.read();
            if now.is_none() || after.is_none() || after == last {
                return true;
            }
            state.rest(true);
            last = after;
        } else {
            last = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use rusqlite::Connection;

    use super::*;

    /// Waits, up to a generous bound, until `done` holds.
    fn until(what: &str, done: impl Fn() -> bool) {
        let start = Instant::now();
        while !done() {
            assert!(start.elapsed() < Duration::from_secs(20), "never: {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A burst of commits rests the watch, and its end brings the watch
    /// back: a store whose watch stayed at rest would hear of another
    /// process's commit only at its poll.
    #[test]
    fn a_burst_rests_the_watch_and_its_end_brings_it_back() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("w.db");
        let writer = Connection::open(&db).unwrap();
        writer
            .execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (v INTEGER);")
            .unwrap();
        let changes = Arc::new(Changes::new());
        let watcher = watch(&db, changes, Duration::from_millis(1500), true, true).unwrap();
        assert_eq!(
            watcher.wake_up(),
            WakeUp::FileWatch {
                poll: Duration::from_millis(1500)
            }
        );
        watcher.arm();
        let state = &watcher.state;
        for v in 0..50 {
            writer.execute("INSERT INTO t VALUES (?1)", [v]).unwrap();
        }
        until("a change heard", || state.burst.count() > 0);
        until("the burst's end", || {
            !state.burst.told.load(Ordering::Acquire) && !state.resting.load(Ordering::Acquire)
        });
        assert!(state.armed.load(Ordering::Acquire), "still armed");
        // Watched again: the next commit is heard.
        let heard = state.burst.count();
        writer.execute("INSERT INTO t VALUES (50)", []).unwrap();
        until("the next commit heard", || state.burst.count() > heard);
    }
}
