//! Counting semaphores with numbered slots and leases, with pluggable
//! storage: the core.
//!
//! A *pool* has `count` slots numbered `0..count`. A *borrow* hands out the
//! lowest free slot as a *lease* with a ttl, optionally waiting for a slot to
//! free up, and wakes the instant one does; a lease is returned early or
//! expires by itself. Every grant carries a *fencing token* that only grows.
//!
//! This crate holds what every store shares: the types, the [`Store`] trait,
//! the [`Pool`] handle users call, slot allocation ([`lowest_free`],
//! [`SlotTable`]), the wait engine ([`Changes`]), the [`Clock`], and, behind
//! the `conformance` feature, the suite every store must pass. Users depend
//! on a store crate (`semaphore-memory`, `semaphore-sqlite`), which
//! re-exports all of it.
//!
//! Rules cited as "R1".."R14" are those of the project's SPEC.
//!
//! ```
//! use std::{sync::Arc, time::Duration};
//! use semaphore_memory::{MemoryStore, Pool, PoolId};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), semaphore_memory::Error> {
//! let store = Arc::new(MemoryStore::new());
//! let pool = Pool::new(store, PoolId::from_name("gpus"));
//! pool.register(4).await?;
//! let lease = pool.borrow(Duration::from_secs(60), Duration::from_secs(1)).await?;
//! println!("holding slot {} with fencing token {}", lease.position, lease.token);
//! # Ok(())
//! # }
//! ```

mod acquire;
mod blocking;
mod cancel;
mod clock;
mod detach;
mod error;
mod guard;
mod id;
mod keepalive;
mod lease;
mod limits;
mod options;
mod pool;
mod set;
mod slot;
mod store;
mod wait;

#[cfg(feature = "conformance")]
pub mod conformance;

pub use clock::{
    Clock, MAX_UNIX_MS, ManualClock, Sleep, SystemClock, from_unix_ms, max_time, saturating_add,
    unix_ms,
};
pub use error::{BoxError, Error, Result};
pub use guard::{LeaseGuard, OwnedLeaseGuard};
pub use id::{LeaseId, POOL_NAMESPACE, PoolId, WaiterId};
pub use lease::{Holder, Lease, PoolState};
pub use limits::Limits;
pub use options::BorrowOptions;
pub use pool::Pool;
pub use set::{LeaseSet, PoolSet};
pub use slot::{SlotTable, lowest_free};
pub use store::{BorrowRequest, Store, TryBorrow, TryBorrowAll};
pub use wait::Changes;

/// Re-exported so that stores and users name the same `async_trait`.
pub use async_trait::async_trait;
