#![doc = include_str!("../../README.md")]
//!
//! # This crate
//!
//! [`MemoryStore`] keeps pools in this process's memory: no I/O, nothing
//! survives the process. It re-exports the whole of `semaphore-core`, so it
//! is the only dependency an in-process user needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod store;

pub use semaphore_core::*;
pub use store::MemoryStore;
