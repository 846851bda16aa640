//! Shared pieces of the example programs: the hold log that worker
//! processes write, the checks run over it (no over-issue), and
//! opening the store a program is given.

pub mod holds;
pub mod store;
