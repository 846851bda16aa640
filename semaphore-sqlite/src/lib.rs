#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod connection;
// Only Linux rings; elsewhere the ring format is left to its tests.
mod backend;
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
mod doorbell;
mod error;
#[cfg(feature = "extension")]
pub mod extension;
mod file;
mod group;
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

pub use backend::SqliteStore;
pub use options::{SqliteOptions, Synchronous};
// The core whole: the user API, the rules and the store authors' kit
// (`store`), so that one dependency is enough.
pub use semaphore_core::*;
pub use time::MAX_CLOCK_SKEW;
pub use watch::WakeUp;

/// The SQLite driver this store is built on, re-exported so that one
/// dependency is enough and the versions always match.
pub use rusqlite;
