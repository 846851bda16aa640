#![doc = include_str!("../../README.md")]
//!
//! # This crate
//!
//! [`MemoryStore`] keeps pools in this process's memory: no I/O, nothing
//! survives the process. It re-exports the user API of `semaphore-core`
//! (and its `store` module, the kit for writing a store), so it is the only
//! dependency an in-process user needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;

// The user API, and the store authors' kit in `store`.
pub use backend::MemoryStore;
#[cfg(feature = "metrics")]
pub use semaphore_core::describe_metrics;
pub use semaphore_core::{
    BorrowOptions, BoxError, Clock, Enqueued, Error, Holder, Lease, LeaseGuard, LeaseId, LeaseSet,
    Limits, ManualClock, MonotonicClock, OwnedLeaseGuard, POOL_NAMESPACE, Pool, PoolId, PoolSet,
    PoolState, QueuedBorrow, Result, Session, SessionId, SessionState, Sleep, SystemClock, store,
};
#[cfg(feature = "tower")]
pub use semaphore_core::{PoolLimit, PoolLimitLayer, Rejection, Unavailable};
