#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod error;
mod listen;
mod options;
mod primitives;
mod returning;
mod schema;
mod session;
mod sql;
mod tx;

#[cfg(feature = "test-util")]
pub mod testing;

pub use error::PostgresError;
pub use options::{MAX_POLL_INTERVAL, MIN_POLL_INTERVAL, PostgresOptions};
// The user API, and the store authors' kit in `store`.
pub use backend::PostgresStore;
#[cfg(feature = "metrics")]
pub use semaphore_core::describe_metrics;
pub use semaphore_core::store::ServerClock;
pub use semaphore_core::{
    BorrowOptions, BoxError, Clock, Enqueued, Error, Holder, Lease, LeaseGuard, LeaseId, LeaseSet,
    Limits, ManualClock, MonotonicClock, OwnedLeaseGuard, POOL_NAMESPACE, Pool, PoolId, PoolSet,
    PoolState, QueuedBorrow, Result, Session, SessionId, SessionState, Sleep, SystemClock, store,
};
#[cfg(feature = "tower")]
pub use semaphore_core::{PoolLimit, PoolLimitLayer, Rejection, Unavailable};

/// The drivers this store is built on, re-exported so that one dependency
/// is enough and the versions always match.
pub use deadpool_postgres;
pub use tokio_postgres;
