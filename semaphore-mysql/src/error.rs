//! MySQL errors as the core's [`Error::Storage`], with the right
//! `retryable` flag.

use semaphore_core::Error;

/// Server error codes after which the same call may succeed: a deadlock
/// (1213) or lock wait timeout (1205), whose transaction InnoDB rolled
/// back; too many connections (1040); the server shutting down (1053); a
/// statement or connection killed (1317, 1927); a read-only server during
/// a failover (1290, 1836).
const TRANSIENT: [u16; 8] = [1213, 1205, 1040, 1053, 1317, 1927, 1290, 1836];

/// A `mysql_async` error as a storage error of `operation`.
///
/// Retryable: I/O (the connection refused, dropped or timed out), the
/// driver's lost or closed connection, and the transient server codes
/// above. Not retryable: anything else the server refused (a missing
/// privilege, a table of another shape), a bad URL, and a reply of the
/// wrong shape.
pub(crate) fn storage(operation: &'static str) -> impl Fn(mysql_async::Error) -> Error {
    move |e| {
        let retryable = match &e {
            mysql_async::Error::Io(_) => true,
            mysql_async::Error::Driver(d) => matches!(
                d,
                mysql_async::DriverError::ConnectionClosed
                    | mysql_async::DriverError::PoolDisconnected
            ),
            mysql_async::Error::Server(s) => TRANSIENT.contains(&s.code),
            _ => false,
        };
        Error::Storage {
            operation,
            retryable,
            source: Box::new(e),
        }
    }
}

/// Whether `e` says the connection is closed (by the server, or on the
/// way): I/O, or the driver's closed connection.
pub(crate) fn closed(e: &mysql_async::Error) -> bool {
    matches!(
        e,
        mysql_async::Error::Io(_)
            | mysql_async::Error::Driver(mysql_async::DriverError::ConnectionClosed)
    )
}

/// Whether InnoDB chose `e`'s statement as a deadlock's victim (1213) or
/// it waited past `innodb_lock_wait_timeout` (1205): the statement, or
/// with 1213 its whole transaction, was rolled back and changed nothing,
/// so running it again is safe.
pub(crate) fn deadlocked(e: &mysql_async::Error) -> bool {
    matches!(e, mysql_async::Error::Server(e) if e.code == 1213 || e.code == 1205)
}

/// How many times a step rolled back by a deadlock is run again before
/// its error is returned (retryable).
pub(crate) const DEADLOCK_RETRIES: u32 = 3;
