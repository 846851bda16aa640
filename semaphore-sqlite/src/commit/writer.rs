//! The writers' queue: an exclusive `flock` on a side file, taken just
//! before `BEGIN IMMEDIATE` and released after `COMMIT`, so that writers of
//! this store in different processes wait in the kernel's queue and the
//! next is woken the instant the last lets go, instead of sleeping and
//! re-trying in SQLite's busy handler (BENCHMARKS.md line 4).
//!
//! A bare `flock` is not fair: a process that unlocks and at once locks
//! again usually wins over the waiter the kernel has only just woken, and
//! two busy processes then starve each other for milliseconds. So a
//! second lock, the turnstile (`<database>-semaphore-turnstile`), is held
//! while waiting for the first: a writer that has just let go must pass
//! the turnstile behind the writer already waiting, and processes take
//! turns.
//!
//! The lock only orders writers; SQLite's own locking still decides what
//! is safe. A writer that does not take it (an older version, a caller's
//! own transaction) falls back to the busy handler and loses nothing.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;

/// The side files `<database>-semaphore-writer` and
/// `<database>-semaphore-turnstile`, opened for locking.
#[derive(Debug)]
pub(crate) struct WriterQueue {
    file: File,
    turnstile: File,
}

/// How many times a writer tries the lock, yielding between tries, before
/// it sleeps in the kernel's queue.
const SPINS: u32 = 256;

/// Held while one write transaction runs; unlocks when dropped.
pub(crate) struct InLine<'a>(&'a File);

impl WriterQueue {
    /// Opens (creating if needed) the side file of `database`.
    pub(crate) fn open(database: &Path) -> io::Result<Self> {
        let side = |suffix: &str| {
            let mut path = database.as_os_str().to_owned();
            path.push(suffix);
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(path)
        };
        Ok(Self {
            file: side("-semaphore-writer")?,
            turnstile: side("-semaphore-turnstile")?,
        })
    }

    /// Waits in the kernel's queue for the writers' lock, through the
    /// turnstile.
    pub(crate) fn enter(&self) -> io::Result<InLine<'_>> {
        self.turnstile.lock()?;
        let locked = self.wait_for_writer().map(|()| InLine(&self.file));
        let passed = self.turnstile.unlock();
        let in_line = locked?;
        passed?;
        Ok(in_line)
    }

    /// Takes the writers' lock at once if it is free and nobody waits at
    /// the turnstile; `None` if taking it would mean waiting.
    pub(crate) fn try_enter(&self) -> io::Result<Option<InLine<'_>>> {
        match self.turnstile.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
        let locked = match self.file.try_lock() {
            Ok(()) => Ok(Some(InLine(&self.file))),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => Err(e),
        };
        let passed = self.turnstile.unlock();
        let in_line = locked?;
        passed?;
        Ok(in_line)
    }

    /// Takes the writers' lock: first by trying it between yields of the
    /// thread for about as long as one write transaction holds it (a woken
    /// waiter costs a context switch, which is longer than the wait), then
    /// by waiting in the kernel.
    fn wait_for_writer(&self) -> io::Result<()> {
        for _ in 0..SPINS {
            match self.file.try_lock() {
                Ok(()) => return Ok(()),
                Err(std::fs::TryLockError::WouldBlock) => std::thread::yield_now(),
                Err(std::fs::TryLockError::Error(e)) => return Err(e),
            }
        }
        self.file.lock()
    }
}

impl Drop for InLine<'_> {
    fn drop(&mut self) {
        // Closing the file would unlock too; an error here leaves nothing
        // held that the kernel does not release with the process.
        let _ = self.0.unlock();
    }
}
