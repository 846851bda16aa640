//! The model-based property test, run against `RedisStore` on a real
//! server: 2,000 sequences by default, more with `PROPTEST_CASES`.

mod common;

semaphore_core::store_model!(common::make, 2_000);
