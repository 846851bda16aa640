//! etcd's errors as the core's [`Error`].

use semaphore_core::Error;

/// Whether a call that failed with `e` may succeed if tried again: the
/// transport failed, or the cluster was unavailable, slow, or changing
/// leader. A refusal (a bad request, no permission) is not.
pub(crate) fn retryable(e: &etcd_client::Error) -> bool {
    match e {
        // gRPC's codes: cancelled 1, unknown 2, deadline exceeded 4,
        // not found 5 (an etcd lease granted for the step lapsed before its
        // transaction ran: a new look grants another), resource exhausted
        // 8, aborted 10, internal 13, unavailable 14.
        etcd_client::Error::GRpcStatus(status) => {
            matches!(status.code() as i32, 1 | 2 | 4 | 5 | 8 | 10 | 13 | 14)
        }
        etcd_client::Error::TransportError(_)
        | etcd_client::Error::IoError(_)
        | etcd_client::Error::WatchError(_)
        | etcd_client::Error::LeaseKeepAliveError(_) => true,
        _ => false,
    }
}

/// Whether a call that failed with `e` never reached etcd: its
/// connection could not be made. Sending it again cannot apply it twice.
pub(crate) fn not_sent(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(status) => {
            status.code() as i32 == 14 && status.message().contains("connect error")
        }
        _ => false,
    }
}

/// The error of `operation` that failed with `e`.
pub(crate) fn storage(operation: &'static str) -> impl FnOnce(etcd_client::Error) -> Error {
    move |e| Error::Storage {
        operation,
        retryable: retryable(&e),
        source: Box::new(e),
    }
}

/// The source of the error of a borrow that named a session that has
/// ended: nothing was granted; the store opens a new session.
#[derive(Debug)]
pub(crate) struct SessionEnded;

impl std::fmt::Display for SessionEnded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "the store's session had ended (its etcd lease lapsed or was revoked); \
             a new one is being opened",
        )
    }
}

impl std::error::Error for SessionEnded {}

/// The error of a step whose transaction lost every race it ran: the
/// pool's keys changed under it each time.
pub(crate) fn contended(operation: &'static str) -> Error {
    Error::Storage {
        operation,
        retryable: true,
        source: "the pool's keys changed under every attempt of the step; try again".into(),
    }
}
