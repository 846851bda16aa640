#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod connection;
// Only Linux rings; elsewhere the ring format is left to its tests.
mod backend;
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
mod doorbell;
mod error;
mod file;
mod holder;
mod liveness;
mod options;
mod placement;
mod queue;
mod schema;
mod sql;
mod time;
mod tx;
mod watch;
mod writer;

pub use options::{MAX_POLL_INTERVAL, MIN_POLL_INTERVAL, SqliteOptions, Synchronous};
// The user API, and the store authors' kit in `store`.
pub use backend::SqliteStore;
#[cfg(feature = "metrics")]
pub use semaphore_core::describe_metrics;
pub use semaphore_core::{
    BorrowOptions, BoxError, Clock, Enqueued, Error, Holder, Lease, LeaseGuard, LeaseId, LeaseSet,
    Limits, ManualClock, MonotonicClock, OwnedLeaseGuard, POOL_NAMESPACE, Pool, PoolId, PoolSet,
    PoolState, QueuedBorrow, Result, Session, SessionId, SessionState, Sleep, SystemClock, store,
};
#[cfg(feature = "tower")]
pub use semaphore_core::{PoolLimit, PoolLimitLayer, Rejection, Unavailable};
pub use time::MAX_CLOCK_SKEW;
pub use watch::WakeUp;

/// The SQLite driver this store is built on, re-exported so that one
/// dependency is enough and the versions always match.
pub use rusqlite;
