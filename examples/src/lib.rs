//! Shared pieces of the example programs: the hold log that worker
//! processes write, and the checks run over it (no over-issue, R10).

pub mod holds;
