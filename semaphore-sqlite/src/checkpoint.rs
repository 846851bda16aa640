//! Checkpoints off the borrow and return path.
//!
//! SQLite's automatic checkpoint runs inside the commit that takes the WAL
//! past 1000 pages: in that borrow or return, which then copies the WAL into
//! the database file (and syncs it, under `synchronous = NORMAL`) before it
//! answers. On line 26 of BENCHMARKS (16 tasks in 4 processes) that was the
//! return-to-grant tail: p99 3.2 ms with it, 1.0-1.1 ms with no checkpoint
//! in the path. The store's connection instead tells a thread of its own
//! ([`Connection::wal_hook`], which replaces the automatic checkpoint on
//! that connection), and the thread checkpoints as the automatic one
//! does (`PASSIVE`: it waits for no reader or writer), on a connection of
//! its own, while borrows and returns go on. Other connections to the file
//! keep SQLite's automatic checkpoint.

use std::path::Path;
use std::sync::mpsc::{Receiver, sync_channel};

use rusqlite::{Connection, OpenFlags};

/// The WAL's size, in pages, at which a commit asks for a checkpoint:
/// SQLite's own default for the automatic one.
const PAGES: i32 = 1000;
/// How many times [`PAGES`] the WAL may reach before a commit checkpoints
/// in its own path (see the hook).
const BEHIND: i32 = 4;

/// Moves `conn`'s checkpoints to a thread that checkpoints the file at
/// `path`. If the thread cannot start, `conn` keeps the automatic
/// checkpoint. The thread ends when `conn` is dropped.
pub(crate) fn off_the_path(conn: &mut Connection, path: &Path) {
    let (ask, asked) = sync_channel::<()>(1);
    let path = path.to_path_buf();
    let started = std::thread::Builder::new()
        .name("sqlite-checkpoint".into())
        .spawn(move || checkpoints(&path, &asked));
    if started.is_err() {
        return;
    }
    let hook = move |wal: &mut rusqlite::hooks::Wal, pages: i32| {
        if pages >= BEHIND * PAGES {
            // The thread's checkpoints copy the pages, but a WAL only
            // starts again from its first page when a writer finds every
            // page copied, which commits made while the thread copies
            // prevent: here, in the commit path as SQLite's own, the last
            // pages are copied and the next commit starts the WAL again.
            let _ = wal.checkpoint();
        } else if pages >= PAGES {
            // Full: a checkpoint is already asked for.
            let _ = ask.try_send(());
        }
        Ok(())
    };
    // On failure the automatic checkpoint stays, and the thread ends with
    // the hook's sender.
    let _ = conn.wal_hook(Some(hook));
}

/// The checkpointer: one `PASSIVE` checkpoint per request, on a connection
/// opened at the first, until the store's connection is gone. A failed
/// checkpoint (the file busy, or gone) waits for the next request.
fn checkpoints(path: &Path, asked: &Receiver<()>) {
    let mut conn = None;
    while asked.recv().is_ok() {
        if conn.is_none() {
            let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
            conn = Connection::open_with_flags(path, flags).ok();
        }
        if let Some(conn) = &conn {
            let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
        }
    }
}
