//! Where a store transaction runs, so that it never holds up the async
//! scheduler for long:
//! - outside any runtime, in place;
//! - inside one, in place when it will wait for nothing: this process's
//!   connection is free and, for a write, the writers' lock is free with
//!   nobody at its turnstile (no other process of ours is mid-write), and
//!   commits do not `fsync` (`synchronous=NORMAL`);
//! - otherwise on the runtime's blocking pool, where waiting for the lock or
//!   the disk holds up no task.
//!
//! In place can still wait a little: for a writer outside the queue (a
//! caller's own transaction) in SQLite's busy handler, or for the `fsync`
//! of a WAL checkpoint, which a commit runs about every thousand pages.
//!
//! Never `block_in_place`, which panics in tasks of a `LocalSet` (even on a
//! multi-thread runtime), something a library cannot detect.

use std::io;
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};
use rusqlite::{Connection, TransactionBehavior};
use semaphore_core::{Error, Result};

use crate::commit::writer::{InLine, WriterQueue};
use crate::error::storage;
use crate::file::Files;
use crate::time::Time;

/// Runs `transaction` on `conn`, after the writers' lock if `writers` is
/// given (a write with the queue on). `in_place` says whether it may run
/// on the calling task when nothing would make it wait.
pub(crate) async fn run<T: Send + 'static>(
    conn: &Arc<Mutex<Connection>>,
    writers: Option<Arc<WriterQueue>>,
    in_place: bool,
    operation: &'static str,
    transaction: impl FnOnce(&mut Connection) -> Result<T> + Send + 'static,
) -> Result<T> {
    if tokio::runtime::Handle::try_current().is_err() {
        return in_line(&mut conn.lock(), writers.as_deref(), operation, transaction);
    }
    if in_place && let Some((mut conn, _entered)) = free_now(conn, writers.as_deref(), operation)? {
        return transaction(&mut conn);
    }
    let conn = conn.clone();
    off_the_scheduler(move || in_line(&mut conn.lock(), writers.as_deref(), operation, transaction))
        .await
        .map_err(|source| Error::Storage {
            operation,
            retryable: false,
            source,
        })?
}

/// Runs `work` on the runtime's blocking pool or, if that pool refuses it
/// (its runtime shuts down: the task is cancelled before it starts), on a
/// thread of its own, so that the transaction still lands and answers a
/// caller that still waits: a guard dropped during its runtime's shutdown
/// is returned. A panic of `work` is the error.
async fn off_the_scheduler<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> std::result::Result<T, Box<dyn std::error::Error + Send + Sync>> {
    let slot = Arc::new(Mutex::new(Some(work)));
    let pool_side = slot.clone();
    let refused =
        match tokio::task::spawn_blocking(move || pool_side.lock().take().map(|w| w())).await {
            Ok(Some(out)) => return Ok(out),
            Ok(None) => return Err("the transaction ran elsewhere".into()),
            Err(join) if join.is_cancelled() => join,
            Err(join) => return Err(Box::new(join)),
        };
    let Some(work) = slot.lock().take() else {
        return Err(Box::new(refused));
    };
    let (answer, answered) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("semaphore-sqlite-write".into())
        .spawn(move || drop(answer.send(work())))
        .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)?;
    answered
        .await
        .map_err(|_| "the transaction's thread ended without an answer".into())
}

/// This process's connection, and the writers' lock if `writers` is
/// given, if both are free at once (nobody at the lock's turnstile);
/// `None` if taking them would mean waiting.
pub(crate) fn free_now<'a>(
    conn: &'a Mutex<Connection>,
    writers: Option<&'a WriterQueue>,
    operation: &'static str,
) -> Result<Option<(MutexGuard<'a, Connection>, Option<InLine<'a>>)>> {
    let Some(conn) = conn.try_lock() else {
        return Ok(None);
    };
    match writers.map(WriterQueue::try_enter).transpose() {
        Ok(Some(None)) => Ok(None), // another process of ours is writing
        Ok(entered) => Ok(Some((conn, entered.flatten()))),
        Err(e) => Err(queue_error(operation, e)),
    }
}

/// Runs `transaction` once the writers' lock, if any, is taken: blocking.
fn in_line<T>(
    conn: &mut Connection,
    writers: Option<&WriterQueue>,
    operation: &'static str,
    transaction: impl FnOnce(&mut Connection) -> Result<T>,
) -> Result<T> {
    let _entered = writers
        .map(WriterQueue::enter)
        .transpose()
        .map_err(|e| queue_error(operation, e))?;
    transaction(conn)
}

/// The writers' lock could not be taken or let go: retryable, as a busy
/// database is.
fn queue_error(operation: &'static str, e: io::Error) -> Error {
    Error::Storage {
        operation,
        retryable: true,
        source: Box::new(e),
    }
}

/// Runs `f` in one transaction of `behavior` on `conn`, once the files
/// are checked, handing it the deciding instant read inside it (unix ms).
pub(crate) fn transaction<T>(
    files: &Files,
    time: &Time,
    conn: &mut Connection,
    operation: &'static str,
    behavior: TransactionBehavior,
    f: impl FnOnce(&Connection, i64) -> rusqlite::Result<T>,
) -> Result<T> {
    files.check().map_err(|e| Error::Storage {
        operation,
        retryable: false,
        source: Box::new(e),
    })?;
    let tx = conn
        .transaction_with_behavior(behavior)
        .map_err(storage(operation))?;
    let now = time.now()?;
    let out = f(&tx, now).map_err(storage(operation))?;
    tx.commit().map_err(storage(operation))?;
    Ok(out)
}
