#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod checkpoint;
mod commit;
mod connection;
mod error;
#[cfg(feature = "extension")]
pub mod extension;
mod file;
mod holder;
mod options;
mod schema;
mod sql;
mod time;
mod tx;
mod wake;

pub use backend::SqliteStore;
pub use options::{SqliteOptions, Synchronous};
// The core whole: the user API, the rules and the store authors' kit
// (`store`), so that one dependency is enough.
pub use semaphore_core::*;
pub use time::MAX_CLOCK_SKEW;
pub use wake::watch::WakeUp;

/// The SQLite driver this store is built on, re-exported so that one
/// dependency is enough and the versions always match.
pub use rusqlite;
