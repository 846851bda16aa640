//! The shared conformance suite, run against `EtcdStore` on a real etcd,
//! each case under a key prefix of its own.

mod common;

semaphore_core::store_conformance!(common::make);
semaphore_core::store_queue_conformance!(common::make);
