#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod across;
mod arrival;
mod backend;
mod cluster;
mod connect;
mod connection;
mod error;
mod keys;
mod link;
mod list;
mod on_slot;
mod options;
mod primitives;
mod reply;
mod scripts;
mod session;
mod slots;
mod subscribe;

#[cfg(feature = "test-util")]
pub mod testing;

pub use backend::RedisStore;
pub use connection::Connection;
pub use options::RedisOptions;
// The core whole: the user API, the rules and the store authors' kit
// (`store`), so that one dependency is enough.
pub use semaphore_core::*;

/// The client this store is built on, re-exported so that one dependency
/// is enough and the versions always match.
pub use redis;
