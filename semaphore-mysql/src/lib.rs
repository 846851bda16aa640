#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod error;
mod leases;
mod link;
mod options;
mod primitives;
mod schema;
mod session;

#[cfg(feature = "test-util")]
pub mod testing;

pub use backend::MysqlStore;
pub use options::MysqlOptions;
// The core whole: the user API, the rules and the store authors' kit
// (`store`), so that one dependency is enough.
pub use semaphore_core::*;

/// The client this store is built on, re-exported so that one dependency
/// is enough and the versions always match.
pub use mysql_async;
