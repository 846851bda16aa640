//! `semaphore_pool._native`: the Python module's Rust half. It wraps the
//! library (every store crate, the core's `Pool`, guards and errors); it
//! re-implements none of it. The Python package `semaphore_pool`
//! (`python/semaphore_pool`) re-exports it, with the exception classes
//! (`_errors.py`) and the type stubs.
//!
//! - [`store`]: the stores, and `Store.pool()`;
//! - [`pool`]: `Pool`'s calls, blocking and asyncio;
//! - [`lease`], [`set`]: the guards (`Lease`, `PoolSet`, `LeaseSet`);
//! - [`borrow`]: `borrow_async`'s awaitable and async context manager;
//! - [`runtime`]: the module's tokio runtime, and blocking calls that
//!   release the GIL and let Ctrl-C in;
//! - [`aio`]: asyncio awaitables of library calls;
//! - [`errors`], [`time`], [`info`], [`held`]: conversions and plumbing.
//!
//! Nothing here is public Rust API (the module is Python's): its docs are
//! for maintainers, built with `--document-private-items`.
#![allow(rustdoc::private_intra_doc_links)]

use pyo3::prelude::*;

pub(crate) mod aio;
pub(crate) mod borrow;
pub(crate) mod errors;
pub(crate) mod held;
pub(crate) mod info;
pub(crate) mod lease;
pub(crate) mod numbers;
pub(crate) mod pool;
pub(crate) mod runtime;
pub(crate) mod set;
pub(crate) mod store;
pub(crate) mod time;

/// The library's user API (every store crate re-exports the core's; the
/// memory store's is as good as any).
pub(crate) use semaphore_memory as semaphore;

/// The module: its classes; the exceptions are `semaphore_pool._errors`'.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<store::Store>()?;
    m.add_class::<store::MemoryStore>()?;
    m.add_class::<store::SqliteStore>()?;
    m.add_class::<store::PostgresStore>()?;
    m.add_class::<store::RedisStore>()?;
    m.add_class::<store::MysqlStore>()?;
    m.add_class::<pool::Pool>()?;
    m.add_class::<lease::Lease>()?;
    m.add_class::<borrow::BorrowAsync>()?;
    m.add_class::<set::PoolSet>()?;
    m.add_class::<set::LeaseSet>()?;
    m.add_class::<info::PoolState>()?;
    m.add_class::<info::LeaseInfo>()?;
    m.add_class::<info::Holder>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
