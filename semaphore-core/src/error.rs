//! The one error type of the library.

use std::time::{Duration, SystemTime};

use crate::{id::LeaseId, id::PoolId, lease::Lease};

/// A boxed error from a storage engine, kept whole as the `source` of
/// [`Error::Storage`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong, as variants a caller acts on.
///
/// - [`InvalidArgument`](Error::InvalidArgument): fix the call; retrying the
///   same call fails the same way.
/// - [`PoolNotFound`](Error::PoolNotFound): register the pool first.
/// - [`Exhausted`](Error::Exhausted): no slot freed up within the wait; retry
///   later or with a longer wait. This is a semaphore answer, never a
///   storage condition.
/// - [`Draining`](Error::Draining): an operator stopped new grants on the
///   pool ([`Pool::set_draining`](crate::Pool::set_draining)); retry once it
///   is un-drained, or borrow with
///   [`BorrowOptions::wait_while_draining`](crate::BorrowOptions::wait_while_draining).
/// - [`LeaseExpired`](Error::LeaseExpired),
///   [`LeaseNotFound`](Error::LeaseNotFound): a renew found the lease no
///   longer active; borrow again.
/// - [`Storage`](Error::Storage): the storage engine failed; see
///   [`Error::is_retryable`]. Nothing was half done.
/// - [`SchemaMismatch`](Error::SchemaMismatch): a persistent store found
///   tables of another shape and changed nothing.
/// - [`ClockSkew`](Error::ClockSkew): this process's clock disagrees with
///   the clock that decides for everyone sharing the store; fix the clock.
/// - [`NoRuntime`](Error::NoRuntime): a call that needs a tokio runtime was
///   made outside one.
/// - [`BlockingInRuntime`](Error::BlockingInRuntime): a blocking call was
///   made inside one.
/// - [`Forked`](Error::Forked): a store handle was used in a child that
///   `fork()` made of the process that made it; make one in the child.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An argument is outside its allowed range. Nothing changed.
    #[error("invalid {field}: got {got}, allowed {allowed}")]
    InvalidArgument {
        /// The argument's name, as in the method's signature (`count`, `ttl`,
        /// `pool_id`, ...).
        field: &'static str,
        /// The allowed range or form, in words.
        allowed: String,
        /// What was passed, rendered for the message.
        got: String,
    },

    /// No pool is registered under this id: never registered, or deleted.
    /// Register it with [`Pool::register`](crate::Pool::register).
    #[error("pool {pool} not found: register it first")]
    PoolNotFound {
        /// The pool asked for.
        pool: PoolId,
    },

    /// Every slot stayed taken for the whole wait; the HTTP service's
    /// `409`. With a zero wait this is returned at once.
    #[error("pool {pool} exhausted: no slot freed up within {waited:?}")]
    Exhausted {
        /// The pool asked for.
        pool: PoolId,
        /// The wait that was allowed, after clamping to
        /// [`Limits::max_wait`](crate::Limits::max_wait).
        waited: Duration,
    },

    /// The pool is draining: it grants nothing new until an operator sets it
    /// back ([`Pool::set_draining`](crate::Pool::set_draining)); returns and
    /// renewals go on (rule "Drain"; the HTTP service's `503`). A
    /// borrow that waits fails with it at once when the drain starts, unless
    /// it was made with
    /// [`BorrowOptions::wait_while_draining`](crate::BorrowOptions::wait_while_draining).
    #[error("pool {pool} is draining: it grants nothing new until it is un-drained")]
    Draining {
        /// The pool asked for.
        pool: PoolId,
    },

    /// The idempotency key names an active lease granted for another
    /// request (another [`BorrowOptions::request_digest`](crate::BorrowOptions::request_digest)):
    /// this borrow cannot be a retry of that one, and is refused in the
    /// store's step that would have granted it (rule
    /// "Idempotency keys are atomic"; the HTTP service's `422`). Use another
    /// key.
    #[error(
        "pool {pool}: the idempotency key names an active lease granted for another request; use another key"
    )]
    KeyReused {
        /// The pool asked for.
        pool: PoolId,
    },

    /// A renew came too late: the lease expired at `expired_at` and
    /// its slot may already be someone else's. Borrow again.
    #[error("lease {lease} of pool {pool} expired at {} ms after the unix epoch: borrow again", crate::clock::unix_ms(*expired_at))]
    LeaseExpired {
        /// The lease's pool.
        pool: PoolId,
        /// The lease asked for.
        lease: LeaseId,
        /// When it expired, to whole milliseconds.
        expired_at: SystemTime,
    },

    /// A renew found no active lease with this id in this pool, though its
    /// expiry had not come: it was returned, force-returned, or its pool was
    /// deleted and registered again, or it never belonged to this pool.
    #[error(
        "lease {lease} of pool {pool} is not active: returned, force-returned, or never granted by this pool"
    )]
    LeaseNotFound {
        /// The pool asked.
        pool: PoolId,
        /// The lease asked for.
        lease: LeaseId,
    },

    /// The lease was bound to its store handle's session,
    /// and the session can no longer vouch for it: no heartbeat landed
    /// before its end (the store was out of reach for longer than the
    /// session timeout). Others may be granted its slots from that end on;
    /// the holder is told first. Borrow again: the store opens a new
    /// session. A session the store itself ended is
    /// [`SessionEnded`](Error::SessionEnded).
    #[error(
        "lease {lease} of pool {pool} is lost with its session: the store could not be reached within the session timeout; borrow again"
    )]
    SessionLost {
        /// The lease's pool.
        pool: PoolId,
        /// The lease.
        lease: LeaseId,
    },

    /// The lease was bound to its store handle's session,
    /// and the store ended that session while this holder still kept it:
    /// its record was deleted or cut short by someone else (an operator, a
    /// cleaning job), or the server lost it (a restart without its data).
    /// An operator's act: the holder learns of it through the
    /// store's wake-up channel where it has one (PostgreSQL `NOTIFY`,
    /// Redis pub/sub), else at its next heartbeat, and others may be
    /// granted its slots meanwhile. Borrow again: the store opens a new
    /// session.
    #[error(
        "lease {lease} of pool {pool} is lost with its session: the store ended the session (its record was deleted or cut short by someone else, or the server lost it); borrow again"
    )]
    SessionEnded {
        /// The lease's pool.
        pool: PoolId,
        /// The lease.
        lease: LeaseId,
    },

    /// The storage engine failed (busy past its timeout, I/O, corruption).
    /// The operation was all or nothing and did not happen.
    ///
    /// Its `Display` says what failed and whether a retry may help; the
    /// engine's own error is its [`source`](std::error::Error::source),
    /// which an error reporter prints after it (`anyhow`'s `{:#}`,
    /// [`Error::chain`]), not a second time inside it.
    #[error("storage error during {operation} ({})", if *retryable { "retryable" } else { "not retryable" })]
    Storage {
        /// The store operation that failed (`borrow`, `register`, `open`, ...).
        operation: &'static str,
        /// Whether the same call may succeed if tried again later (for
        /// SQLite: `SQLITE_BUSY` and `SQLITE_LOCKED` are, I/O and corruption
        /// are not).
        retryable: bool,
        /// The engine's own error, kept whole (for SQLite a
        /// `rusqlite::Error` with SQLite's code).
        #[source]
        source: BoxError,
    },

    /// A persistent store found its tables in a shape it does not know and
    /// changed nothing. Open the file with the library version that wrote
    /// it, or migrate it.
    #[error("schema mismatch: expected {expected}, found {found}")]
    SchemaMismatch {
        /// What this version of the store expects.
        expected: String,
        /// What it found.
        found: String,
    },

    /// The clock this store was given disagrees with the clock that decides
    /// expiry for everyone sharing the store (rule "Time": the machine's
    /// clock for a SQLite file) by more than `tolerance`. The call was
    /// refused and nothing changed: a process whose clock is off would
    /// otherwise time its waits by the wrong instants. Give the store the
    /// system clock (the default), or fix the clock you gave it. A step of
    /// the system clock itself (NTP) moves every process at once and is
    /// never refused.
    #[error(
        "clock skew: the store's clock is {skew:?} {} the {reference}, more than the {tolerance:?} allowed; use the system clock or fix the one given to the store",
        if *ahead { "ahead of" } else { "behind" }
    )]
    ClockSkew {
        /// How far the store's clock is from the deciding clock.
        skew: Duration,
        /// Whether the store's clock is ahead (fast) or behind (slow).
        ahead: bool,
        /// The largest disagreement allowed.
        tolerance: Duration,
        /// The deciding clock, in words ("machine's clock").
        reference: &'static str,
    },

    /// `operation` needs a tokio runtime and was called outside one: a
    /// borrow that must wait (an exhausted pool, a non-zero `wait`) needs
    /// the runtime's timer, and a store whose driver runs on tokio (the
    /// PostgreSQL store) needs it for every call. Nothing changed and
    /// nothing is held. Call it from inside a runtime with its time driver
    /// enabled (`#[tokio::main]`, `Runtime::block_on`).
    #[error(
        "{operation} needs a tokio runtime (for a wait's timer, or the store's driver): call it inside #[tokio::main] or Runtime::block_on"
    )]
    NoRuntime {
        /// The call that needed the runtime (`borrow`, `inspect`, ...).
        operation: &'static str,
    },

    /// A store handle made in one process was used in a child that
    /// `fork()` made of it (Python's `multiprocessing` with the fork start
    /// method, a pre-fork server, `os.fork`). The child has a copy of the
    /// handle but not the threads and connections that drive it, so the
    /// call is refused before it sends or waits for anything: nothing
    /// changed, and nothing was borrowed as the parent (rule "R16 whatever
    /// a process's children do"; [`store::ForkCheck`](crate::store::ForkCheck)).
    /// Make a new store in the child, or start children with `spawn`.
    #[error(
        "{operation}: this store handle was made in process {made_in}, and process {used_in} is a child forked from it; a store cannot be used across fork(): make a new store in the child"
    )]
    Forked {
        /// The call that was refused (`borrow`, `inspect`, ...).
        operation: &'static str,
        /// The process that made the handle.
        made_in: u32,
        /// The process that used it: a child of `made_in`.
        used_in: u32,
    },

    /// A `blocking_*` method was called from inside a tokio runtime, where
    /// blocking the thread would stall the runtime (or deadlock it).
    /// Nothing was done. Await the async method instead.
    #[error(
        "blocking {operation} called inside a tokio runtime: await the async {operation} instead"
    )]
    BlockingInRuntime {
        /// The blocking call (`borrow`, `inspect`, ...).
        operation: &'static str,
    },
}

impl Error {
    /// Whether retrying the same call later may succeed: `true` for
    /// [`Exhausted`](Error::Exhausted) and for retryable
    /// [`Storage`](Error::Storage) errors, `false` otherwise.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Exhausted { .. } | Error::Draining { .. } => true,
            Error::Storage { retryable, .. } => *retryable,
            _ => false,
        }
    }

    /// This error and every error under it ([`source`](std::error::Error::source)),
    /// on one line, each after a colon: what a program that reports an
    /// error (a log line, a command's message) prints. For
    /// [`Storage`](Error::Storage), the engine's own words follow the
    /// operation: `storage error during borrow (retryable): connection
    /// refused`.
    pub fn chain(&self) -> impl std::fmt::Display + '_ {
        Chain(self)
    }

    /// The error for a renew of `lease` that found it not active at `now`:
    /// [`LeaseExpired`](Error::LeaseExpired) if its `expires_at` has passed,
    /// else [`LeaseNotFound`](Error::LeaseNotFound). For stores that renew
    /// by another path than [`Pool::renew`](crate::Pool::renew).
    pub fn not_renewed(lease: &Lease, now: SystemTime) -> Self {
        if lease.expires_at <= now {
            Error::LeaseExpired {
                pool: lease.pool,
                lease: lease.id,
                expired_at: lease.expires_at,
            }
        } else {
            Error::LeaseNotFound {
                pool: lease.pool,
                lease: lease.id,
            }
        }
    }

    pub(crate) fn invalid(field: &'static str, allowed: impl ToString, got: impl ToString) -> Self {
        Error::InvalidArgument {
            field,
            allowed: allowed.to_string(),
            got: got.to_string(),
        }
    }
}

/// [`Error::chain`]'s display.
struct Chain<'a>(&'a Error);

impl std::fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = std::error::Error::source(self.0);
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_storage_error_shows_its_source_once_and_the_chain_shows_it_after() {
        let e = Error::Storage {
            operation: "borrow",
            retryable: true,
            source: Box::new(std::io::Error::other("connection refused")),
        };
        assert_eq!(e.to_string(), "storage error during borrow (retryable)");
        assert_eq!(
            std::error::Error::source(&e).map(ToString::to_string),
            Some("connection refused".to_string())
        );
        assert_eq!(
            e.chain().to_string(),
            "storage error during borrow (retryable): connection refused"
        );
    }
}
