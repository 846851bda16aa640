//! The shared conformance suite on a real Redis Cluster, every pool of a
//! case on one hash slot (a hash tag in the store's prefix): multi-pool
//! borrows are then one atomic script.

mod common;

semaphore_core::store_conformance!(common::make_cluster_one_slot);
