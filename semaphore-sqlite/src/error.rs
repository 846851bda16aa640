//! Mapping SQLite's errors onto the core's (SPEC R14, "SQLite store").

use rusqlite::ErrorCode;
use semaphore_core::Error;

/// Whether an error is worth retrying: `SQLITE_BUSY` and `SQLITE_LOCKED`
/// (another connection held the lock past the busy timeout) are; I/O
/// errors, a full disk, a corrupt or read-only file are not.
pub(crate) fn is_retryable(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// Wraps a rusqlite error as [`Error::Storage`] for `operation`, keeping it
/// whole as the source, with SQLite's own code.
pub(crate) fn storage(operation: &'static str) -> impl Fn(rusqlite::Error) -> Error {
    move |e| Error::Storage {
        operation,
        retryable: is_retryable(&e),
        source: Box::new(e),
    }
}
