//! The model-based property test, run against `MysqlStore` on a real
//! server: 500 sequences by default, more with `PROPTEST_CASES`.

mod common;

semaphore_core::store_model!(common::make, 500);
