//! A fault-injection suite for the semaphore stores, Jepsen style: holder
//! processes borrow slots of one pool and act on them while
//! `LeaseGuard::is_held()` says so, a nemesis faults them (network cuts,
//! blips and partitions through a proxy per holder, `SIGSTOP`, `SIGKILL`,
//! server restarts, idle-session timeouts and connection kills on the
//! server; for SQLite, deleting the store's side files), and a checker
//! reads their logs for the invariants of fencing, no over-issue and
//! sessions:
//! no two holders act on a slot at once, tokens grow in the order holders
//! act, and a holder knows it lost a lease before anyone else can be
//! granted its slots. See the README for how to run it.
//!
//! - [`proxy`]: the TCP proxy with faults.
//! - [`event`]: what holders and the nemesis log.
//! - [`check`]: the checker, a pure function over the logs.
//! - [`mod@run`]: the orchestrator and the nemesis.
//! - the `faults-holder` binary: one holder process.

pub mod check;
pub mod clock;
pub mod event;
pub mod proxy;
pub mod run;
mod server;
#[cfg(test)]
mod stall;

pub use run::{Config, Outcome, run, run_and_assert};
pub use server::{Audit, Server, StoreKind};
