//! The shared conformance suites and the model test, run against
//! `RedisStore` on a real Redis Cluster (three masters, one replica each,
//! started on loopback ports), each case under a key prefix of its own.

mod common;

semaphore_core::store_conformance!(common::make_cluster);
semaphore_core::store_queue_conformance!(common::make_cluster);
semaphore_core::store_model!(common::make_cluster, 300);
