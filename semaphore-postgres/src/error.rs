//! Mapping the driver's and the connection pool's errors onto the core's
//! (rule "Stores").

use std::fmt;

use semaphore_core::Error;
use tokio_postgres::error::SqlState;

/// A driver error as the store reports it: the `source` of
/// [`Error::Storage`] for every PostgreSQL failure.
///
/// `tokio_postgres::Error` displays a server's error as just "db error",
/// leaving PostgreSQL's own words to its source; this type shows them in
/// its message (severity, SQLSTATE, message, and the server's detail and
/// hint when it gave them), so that a logged storage error says what the
/// server said. The driver's error stays whole: [`driver`](Self::driver),
/// and as this error's `source`.
///
/// ```no_run
/// # async fn f(pool: semaphore_postgres::Pool) {
/// use semaphore_postgres::{Error, PostgresError};
///
/// if let Err(Error::Storage { source, .. }) = pool.inspect().await {
///     if let Some(pg) = source.downcast_ref::<PostgresError>() {
///         eprintln!("SQLSTATE {:?}: {pg}", pg.code());
///     }
/// }
/// # }
/// ```
#[derive(Debug)]
pub struct PostgresError(tokio_postgres::Error);

impl PostgresError {
    /// The server's SQLSTATE, if the server answered with an error.
    pub fn code(&self) -> Option<&SqlState> {
        self.0.code()
    }

    /// The driver's error, whole.
    pub fn driver(&self) -> &tokio_postgres::Error {
        &self.0
    }
}

impl fmt::Display for PostgresError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(db) = self.0.as_db_error() {
            write!(
                f,
                "{} {}: {}",
                db.severity(),
                db.code().code(),
                db.message()
            )?;
            if let Some(detail) = db.detail() {
                write!(f, " (detail: {detail})")?;
            }
            if let Some(hint) = db.hint() {
                write!(f, " (hint: {hint})")?;
            }
            return Ok(());
        }
        write!(f, "{}", self.0)?;
        let mut cause = std::error::Error::source(&self.0);
        while let Some(e) = cause {
            write!(f, ": {e}")?;
            cause = e.source();
        }
        Ok(())
    }
}

impl std::error::Error for PostgresError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// Whether a database error is worth retrying: serialization failures
/// (40001), deadlocks (40P01), lock timeouts (55P03), cancelled statements
/// (57014, a statement timeout), connection exceptions (class 08), a
/// server shutting down (57P01-57P03), and a connection that closed, failed
/// on I/O or never answered. Constraint violations, syntax errors, rows
/// that do not decode and the like are not.
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
        // No SQLSTATE: retryable if the connection failed (I/O, refused,
        // timed out); not if a row or parameter did not convert, which
        // would fail the same way again.
        None => {
            let io = std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>());
            io || e.to_string() == "timeout waiting for server"
        }
    }
}

/// Wraps a driver error as [`Error::Storage`] for `operation`, keeping it
/// whole as the source, with PostgreSQL's SQLSTATE.
pub(crate) fn storage(operation: &'static str) -> impl Fn(tokio_postgres::Error) -> Error {
    move |e| Error::Storage {
        operation,
        retryable: is_retryable(&e),
        source: Box::new(PostgresError(e)),
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
        let source: semaphore_core::BoxError = match e {
            PoolError::Backend(db) => Box::new(PostgresError(db)),
            other => Box::new(other),
        };
        Error::Storage {
            operation,
            retryable,
            source,
        }
    }
}

#[cfg(all(test, feature = "test-util"))]
mod tests {
    use super::*;
    use crate::testing::TestServer;

    async fn client() -> tokio_postgres::Client {
        let (client, connection) =
            tokio_postgres::connect(TestServer::shared().url(), tokio_postgres::NoTls)
                .await
                .unwrap();
        tokio::spawn(connection);
        client
    }

    /// A row that does not decode fails the same way every time: not
    /// retryable.
    #[tokio::test]
    async fn a_row_that_does_not_decode_is_not_retryable() {
        let row = client()
            .await
            .query_one("SELECT 'x'::text", &[])
            .await
            .unwrap();
        let e = row.try_get::<_, i64>(0).unwrap_err();
        assert!(e.code().is_none());
        assert!(!is_retryable(&e), "{e}");
    }

    /// The server's own words are in the message, not just "db error".
    #[tokio::test]
    async fn the_servers_message_is_kept() {
        let e = client()
            .await
            .query_one("SELECT 1/0", &[])
            .await
            .unwrap_err();
        let shown = storage("inspect")(e).chain().to_string();
        assert!(shown.contains("22012: division by zero"), "{shown}");
        assert!(shown.contains("not retryable"), "{shown}");
    }

    /// A connection refused is retryable.
    #[tokio::test]
    async fn a_refused_connection_is_retryable() {
        let Err(e) =
            tokio_postgres::connect("host=127.0.0.1 port=1 user=x", tokio_postgres::NoTls).await
        else {
            panic!("a connection to port 1 was accepted");
        };
        assert!(is_retryable(&e), "{e}");
        let shown = storage("open")(e).chain().to_string();
        assert!(shown.contains("refused"), "{shown}");
    }
}
