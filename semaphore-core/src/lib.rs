//! Counting semaphores with numbered slots and leases, with pluggable
//! storage: the core.
//!
//! A *pool* has `count` slots numbered `0..count`. A *borrow* hands out the
//! lowest free slot as a *lease* with a ttl, optionally waiting for a slot to
//! free up, and wakes the instant one does; a lease is returned early or
//! expires by itself. Every grant carries a *fencing token* that only grows.
//!
//! This crate holds what every store shares. Its root is the user API: the
//! [`Pool`] handle users call, its guards and leases, ids, [`Limits`],
//! [`Error`] and the [`Clock`]. The [`store`] module is the store authors'
//! kit: the [`store::Store`] trait, slot allocation, the wait engine
//! and the time helpers. Behind the `conformance` feature is the suite
//! every store must pass. Users depend on a store crate
//! (`semaphore-memory`, `semaphore-sqlite`, `semaphore-postgres`), which
//! re-exports the user API and the [`store`] module.
//!
//! The rules every store keeps are written down in [`rules`]; the
//! [`Store`](store::Store) trait's contract and the conformance cases cite them by
//! number, other docs by name ("Time", "Lost replies").
//!
//! # Several slots, and holders that die
//! A borrow may take `n` slots as one lease ([`Pool::borrow_with`] with
//! [`BorrowOptions::slots`]): the `n` lowest free positions, one id,
//! one token, one expiry. A lease is by default bound to its holder's
//! session ([`BorrowOptions::bound`]): the process itself
//! for SQLite (a kernel lock), and for PostgreSQL, Redis and MySQL a
//! [`Session`] of the store handle, a record with an end on the server's
//! clock that the handle heartbeats. A connection lost and back within the
//! session timeout ends nothing; a holder gone for good loses its bound
//! leases (at once for SQLite, at its session's end otherwise) instead of
//! at their ttl. [`LeaseGuard::forget`] unbinds a lease.
//!
//! # The holder knows first
//! [`LeaseGuard::is_held`] says, without I/O, whether the lease is still
//! certainly held: it compares the lease's expiry and its session's end
//! with the store's clock, which for a networked store never reads earlier
//! than the server's ([`store::ServerClock`]). It turns `false`, and
//! [`LeaseGuard::lost`] resolves, no later than anyone else can be granted
//! the lease's slots, as long as this process runs. A holder that
//! acts on the resource only while it says `true`, and passes the fencing
//! token along, never acts beside the next holder. [`Session::state`]
//! tells whether the store can be reached (Curator's connection states:
//! connected, suspended, lost).
//!
//! # Features
//! All off by default; each store crate forwards them.
//! - `serde`: `Serialize` and `Deserialize` for [`PoolId`], [`LeaseId`],
//!   [`Lease`], [`PoolState`], [`Holder`] and [`Limits`].
//! - `tracing`: spans and events through `tracing` (below).
//! - `metrics`: counters, gauges and a histogram through the `metrics`
//!   facade (below); the application installs the exporter.
//! - `tower`: [`PoolLimitLayer`], a tower layer that runs each HTTP request
//!   under a lease.
//! - `conformance`: the suite every store must pass.
//!
//! # Instrumentation
//! Both features see what a [`Pool`] handle and its guards do in this
//! process; [`PoolSet`]'s all-or-nothing borrows are not instrumented yet.
//!
//! ## Naming a pool
//! Spans, events and metric labels name a pool by its alias
//! ([`Pool::with_alias`](crate::Pool::with_alias)), or else by
//! `pool-` and 8 hex digits of a one-way hash of its id: a pool id may be a
//! secret credential (the HTTP service's are), so it never appears unless
//! the caller makes it the alias.
//!
//! ## Tracing (target `semaphore`)
//! - span `borrow` (debug) around each borrow, with `pool`, `ttl_ms` and
//!   `wait_ms` (as asked), then `waited_ms`, `position`, `token` and
//!   `outcome` (`granted`, `exhausted` or `error`, with `error`);
//! - events (debug) `lease returned` and `lease renewed`; `expired lease
//!   seen` (debug) when a return or renewal finds this process's lease
//!   expired; `lease force-returned` (info); `lease lost` (warn) when a
//!   keep-alive renewal finds its lease gone.
//!
//! ## Metrics (the `metrics` facade; install any recorder)
//! All but the last carry the label `pool`; `describe_metrics()` gives
//! each its help text and unit:
//! - counters `semaphore_grants_total`, `semaphore_returns_total`,
//!   `semaphore_expiries_total` (this process's leases found expired),
//!   `semaphore_exhausted_total` (borrows that found no slot in their wait),
//!   `semaphore_storage_errors_total` (any `Pool` call the store failed),
//!   `semaphore_leases_lost_total`;
//! - gauges `semaphore_in_use` (leases this process holds through guards)
//!   and `semaphore_waiting` (this process's borrows in progress);
//! - histogram `semaphore_borrow_wait_seconds`: from a borrow's call to its
//!   grant or its refusal (`Exhausted`);
//! - histogram `semaphore_store_batch_size`, no label: the primitives a
//!   store that groups them (rule "Group commit"; the SQLite store with
//!   `Synchronous::Full`) sent in each round trip;
//! - counter `semaphore_store_busy_retries_total`, no label: the times a
//!   store found its storage locked by another writer and tried again after
//!   a pause (the SQLite store's busy handler), counted by the store
//!   ([`store::busy_retried`]).
//!
//! ```
//! use std::{sync::Arc, time::Duration};
//! use semaphore_memory::{MemoryStore, Pool, PoolId};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), semaphore_memory::Error> {
//! let store = Arc::new(MemoryStore::new());
//! let pool = Pool::new(store, PoolId::from_name("gpus"));
//! pool.register(4).await?;
//! let lease = pool.borrow(Duration::from_secs(60), Duration::from_secs(1)).await?;
//! println!("holding slot {} with fencing token {}", lease.position, lease.token);
//! # Ok(())
//! # }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

// `Pool`'s methods in the order its docs page reads them: the handle, its
// administration and leases (`pool`), its borrows (`borrow`, `held`), its
// blocking API.
mod pool;
// Kept apart from the rest by this comment, so that rustfmt keeps the order.
mod borrow;
mod held;
// The rest.
mod acquire;
mod blocking;
mod cancel;
mod clock;
mod detach;
mod error;
mod follow;
mod give_back;
mod guard;
mod id;
mod keepalive;
mod keys;
#[cfg(feature = "tower")]
mod layer;
mod lease;
mod limits;
#[cfg(feature = "fault-mutants")]
mod mutant;
mod options;
mod parse;
mod positions;
mod primitives;
mod queued;
mod request;
#[doc = include_str!("../RULES.md")]
pub mod rules {}
mod server_clock;
mod session;
mod set;
mod slot;
pub mod store;
mod sync;
/// The loom models (`scripts/loom`): a build with `--cfg semaphore_loom` only.
#[cfg(semaphore_loom)]
#[doc(hidden)]
pub use wait::models as loom_models;
mod telemetry;
mod wait;

#[cfg(feature = "conformance")]
pub mod conformance;

// The user API: one page.
pub use blocking::Blocking;
pub use clock::{Clock, ManualClock, MonotonicClock, Sleep, SystemClock};
pub use error::{BoxError, Error, Result};
pub use guard::{LeaseGuard, OwnedLeaseGuard};
pub use held::{HELD_POLL_INTERVAL, HeldPlace};
pub use id::{LeaseId, POOL_NAMESPACE, PoolId, SessionId, WaiterId};
#[cfg(feature = "tower")]
pub use layer::{PoolLimit, PoolLimitLayer, Rejection, Unavailable};
pub use lease::{Holder, Lease, PoolState, Positions};
pub use limits::Limits;
pub use options::BorrowOptions;
pub use pool::{Pool, Renewing, Waiting};
pub use queued::{PlaceKind, QueuedPlace};
pub use session::{Session, SessionState};
pub use set::{LeaseSet, PoolSet};
#[cfg(feature = "metrics")]
pub use telemetry::describe_metrics;
