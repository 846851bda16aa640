//! Mapping SQLite's errors onto the core's ("SQLite store").

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

/// An I/O error while reading a file that looked sound a moment before:
/// what SQLite reports when the `-wal` or `-shm` file of a database was
/// deleted or replaced while another connection held it open. Kept as the
/// `source` of [`Error::Storage`] (not retryable), with SQLite's own error
/// as its source.
#[derive(Debug)]
pub(crate) struct FileReplaced(pub(crate) rusqlite::Error);

impl std::fmt::Display for FileReplaced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: the database's -wal or -shm file was probably deleted or replaced while \
             another process held it open; stop every process that uses the file, then open \
             it again",
            self.0
        )
    }
}

impl std::error::Error for FileReplaced {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// Whether `e` is an I/O failure rather than something about the tables.
pub(crate) fn is_io(e: &rusqlite::Error) -> bool {
    matches!(e.sqlite_error_code(), Some(ErrorCode::SystemIoFailure))
}
