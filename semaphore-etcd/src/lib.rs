#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod borrow;
mod decide;
mod error;
mod grants;
mod options;
mod places;
mod primitives;
mod record;
mod session;
mod standing;
mod view;
mod watch;

#[cfg(feature = "test-util")]
pub mod testing;

pub use backend::EtcdStore;
pub use options::EtcdOptions;
// The core whole: the user API, the rules and the store authors' kit
// (`store`), so that one dependency is enough.
pub use semaphore_core::*;

/// The client this store is built on, re-exported so that one dependency
/// is enough and the versions always match.
pub use etcd_client;
