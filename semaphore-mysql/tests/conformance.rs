//! The shared conformance suite, run against `MysqlStore` on a real
//! server, each case under a table prefix of its own.

mod common;

semaphore_core::store_conformance!(common::make);
semaphore_core::store_queue_conformance!(common::make);
