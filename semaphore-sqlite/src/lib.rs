#![doc = include_str!("../README.md")]

mod error;
mod liveness;
mod options;
mod schema;
mod sql;
mod store;
mod tx;
mod watch;

pub use options::{SqliteOptions, Synchronous};
pub use semaphore_core::*;
pub use store::SqliteStore;

/// The SQLite driver this store is built on, re-exported so that one
/// dependency is enough and the versions always match.
pub use rusqlite;
