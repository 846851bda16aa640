//! The model-based property test on a real etcd.

mod common;

semaphore_core::store_model!(common::make, 200);
