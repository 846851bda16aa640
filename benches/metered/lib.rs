//! Nothing: this package holds one bench, BENCHMARKS.md line 20
//! (`cargo bench -p semaphore-benches-metered`), apart from the others so
//! that the core's `metrics` feature it needs does not instrument theirs.
