#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
mod listen;
mod options;
mod primitives;
mod schema;
mod sql;
mod store;
mod time;
mod tx;

#[cfg(feature = "test-util")]
pub mod testing;

pub use error::PostgresError;
pub use options::{MAX_POLL_INTERVAL, MIN_POLL_INTERVAL, PostgresOptions};
pub use semaphore_core::*;
pub use store::PostgresStore;
pub use time::ServerClock;

/// The drivers this store is built on, re-exported so that one dependency
/// is enough and the versions always match.
pub use deadpool_postgres;
pub use tokio_postgres;
