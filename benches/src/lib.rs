//! Criterion benchmarks live in `benches/`; `report` turns their estimates into BENCHMARKS.md's table.
