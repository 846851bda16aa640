//! Mapping the driver's and the connection pool's errors onto the core's
//! (SPEC R14, "PostgreSQL store").

use semaphore_core::Error;
use tokio_postgres::error::SqlState;

/// Whether a database error is worth retrying: serialization failures
/// (40001), deadlocks (40P01), lock timeouts (55P03), cancelled statements
/// (57014, a statement timeout), connection exceptions (class 08), a
/// server shutting down (57P01-57P03), and a connection that closed or
/// never answered. Constraint violations, syntax errors and the like are
/// not.
pub(crate) fn is_retryable(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        Some(code) => {
            let retryable = [
                SqlState::T_R_SERIALIZATION_FAILURE,
                SqlState::T_R_DEADLOCK_DETECTED,
                SqlState::LOCK_NOT_AVAILABLE,
                SqlState::QUERY_CANCELED,
                SqlState::ADMIN_SHUTDOWN,
                SqlState::CRASH_SHUTDOWN,
                SqlState::CANNOT_CONNECT_NOW,
            ];
            retryable.contains(code) || code.code().starts_with("08")
        }
        // No SQLSTATE: an I/O error, a timeout, a lost connection.
        None => true,
    }
}

/// Wraps a driver error as [`Error::Storage`] for `operation`, keeping it
/// whole as the source, with PostgreSQL's SQLSTATE.
pub(crate) fn storage(operation: &'static str) -> impl Fn(tokio_postgres::Error) -> Error {
    move |e| Error::Storage {
        operation,
        retryable: is_retryable(&e),
        source: Box::new(e),
    }
}

/// Wraps a connection pool error: a timeout or a failed connection is
/// retryable; a pool that was closed or is misconfigured is not.
pub(crate) fn pool(operation: &'static str) -> impl Fn(deadpool_postgres::PoolError) -> Error {
    use deadpool_postgres::PoolError;
    move |e| {
        let retryable = match &e {
            PoolError::Timeout(_) => true,
            PoolError::Backend(db) => is_retryable(db),
            PoolError::Closed | PoolError::NoRuntimeSpecified | PoolError::PostCreateHook(_) => {
                false
            }
        };
        Error::Storage {
            operation,
            retryable,
            source: Box::new(e),
        }
    }
}
