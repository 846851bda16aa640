#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod arrival;
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

pub use backend::PostgresStore;
pub use error::PostgresError;
pub use options::PostgresOptions;
// The core whole: the user API, the rules and the store authors' kit
// (`store`), so that one dependency is enough.
pub use semaphore_core::*;

/// The drivers this store is built on, re-exported so that one dependency
/// is enough and the versions always match.
pub use deadpool_postgres;
pub use tokio_postgres;
