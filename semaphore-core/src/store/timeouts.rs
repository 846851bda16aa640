//! The times a store's calls and sessions are bounded by.

use std::time::Duration;

use super::{DecidingClock, MAX_UNIX_MS};
use crate::error::Result;

/// The session timeout a networked store uses unless told otherwise:
/// 10 s.
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// The shortest session timeout a store accepts: 1 s.
pub const MIN_SESSION_TIMEOUT: Duration = Duration::from_secs(1);

/// Checks a store option's session timeout, if one was set, against
/// [`MIN_SESSION_TIMEOUT`] and [`MAX_UNIX_MS`].
///
/// # Errors
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument) naming
/// `session_timeout` if it is below 1 s or above [`MAX_UNIX_MS`] ms.
pub fn check_session_timeout(timeout: Option<Duration>) -> Result<()> {
    let Some(timeout) = timeout else {
        return Ok(());
    };
    if timeout < MIN_SESSION_TIMEOUT || timeout > Duration::from_millis(MAX_UNIX_MS) {
        return Err(crate::error::Error::InvalidArgument {
            field: "session_timeout",
            allowed: format!("{MIN_SESSION_TIMEOUT:?} or more"),
            got: format!("{timeout:?}"),
        });
    }
    Ok(())
}

/// The session timeout a store uses: the one set, else
/// [`DEFAULT_SESSION_TIMEOUT`]; in test mode ([`DecidingClock::Manual`])
/// the longest there is, so that a test that moves the clock by hours ends
/// no session unless it sets a timeout to test sessions.
pub fn session_timeout(set: Option<Duration>, time: &DecidingClock) -> Duration {
    match (set, time) {
        (Some(timeout), _) => timeout,
        (None, DecidingClock::Manual(_)) => Duration::from_millis(MAX_UNIX_MS),
        (None, DecidingClock::Server(_)) => DEFAULT_SESSION_TIMEOUT,
    }
}

/// The longest a networked store waits for one call's answer
/// ([`bounded`]): a stalled network or a stopped server fails the call,
/// retryably, instead of hanging it (and a `release`, a `semaphore run`
/// whose command has ended) for as long as the stall lasts.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `call`, one store operation named `operation`, for at most
/// [`CALL_TIMEOUT`].
///
/// # Errors
/// `call`'s own; [`Error::Storage`](crate::Error::Storage), retryable, if
/// it did not finish in time. It is dropped then: whether it took effect
/// is unknown, as for any call whose answer was lost (a borrow's retry
/// asks under the same lease id, rule "Lost replies").
pub async fn bounded<T>(
    operation: &'static str,
    call: impl std::future::Future<Output = crate::error::Result<T>>,
) -> crate::error::Result<T> {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(answer) => answer,
        Err(_) => Err(crate::error::Error::Storage {
            operation,
            retryable: true,
            source: format!(
                "the store did not answer within {} s: the network or the server is stalled",
                CALL_TIMEOUT.as_secs()
            )
            .into(),
        }),
    }
}
