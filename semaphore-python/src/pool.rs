//! `Pool`: the handle on one pool of a store, with its blocking calls and
//! their `_async` forms.

use pyo3::prelude::*;

use crate::aio::{awaitable, awaitable_to_end};
use crate::borrow::{BorrowAsync, granted};
use crate::info::{Holder, PoolState};
use crate::lease::Lease;
use crate::runtime::{Signals, wait};
use crate::semaphore::{self, BorrowOptions, LeaseId};
use crate::time::seconds;

/// A handle on one pool of a store: register, inspect, delete, borrow and
/// return. Made by `Store.pool(name)`; cheap, and every handle on the same
/// name (in any thread, process or language sharing the store) means the
/// same pool.
///
/// Times are seconds (an int or a float). Every blocking call releases the
/// GIL while it waits, and Ctrl-C interrupts a wait (raising
/// `KeyboardInterrupt`; an interrupted borrow takes nothing). Each has an
/// `_async` form for asyncio, to await; cancelling it while it waits takes
/// nothing either.
#[pyclass(module = "semaphore_pool", frozen)]
pub(crate) struct Pool {
    pub(crate) pool: semaphore::Pool,
    pub(crate) inline: bool,
    name: Option<String>,
}

impl Pool {
    pub(crate) fn new(pool: semaphore::Pool, inline: bool, name: Option<String>) -> Self {
        Self { pool, inline, name }
    }
}

/// The borrow's options, checked by the library at the borrow.
pub(crate) fn options(
    slots: u32,
    key: Option<String>,
    owner: Option<String>,
    wait_while_draining: bool,
) -> BorrowOptions {
    let mut options = BorrowOptions::new()
        .slots(slots)
        .wait_while_draining(wait_while_draining);
    if let Some(key) = key {
        options = options.key(key);
    }
    if let Some(owner) = owner {
        options = options.owner(owner);
    }
    options
}

#[pymethods]
impl Pool {
    /// The pool's id, a UUID string (for a name, the same UUID as
    /// `PoolId::from_name` in Rust).
    #[getter]
    fn id(&self) -> String {
        self.pool.id().to_string()
    }

    /// The name the handle was made with, if any.
    #[getter]
    fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// Creates the pool with `count` slots (0 to 1000), or sets the count of
    /// an existing one; returns its state. Idempotent. Raising the count
    /// wakes waiters at once; lowering it revokes nothing.
    ///
    /// Raises `InvalidArgument` (field `count`) or `StorageError`.
    fn register(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = crate::numbers::count)] count: u32,
    ) -> PyResult<PoolState> {
        let pool = self.pool.clone();
        wait(py, self.inline, Signals::Checked, async move {
            pool.register(count).await.map(PoolState::from)
        })
    }

    /// The pool's state now: `count`, `in_use`, `available`, `draining`.
    ///
    /// Raises `PoolNotFound` or `StorageError`.
    fn inspect(&self, py: Python<'_>) -> PyResult<PoolState> {
        let pool = self.pool.clone();
        wait(py, self.inline, Signals::Checked, async move {
            pool.inspect().await.map(PoolState::from)
        })
    }

    /// Removes the pool and all its leases; `True` if it existed.
    /// Idempotent. Its waiters fail with `PoolNotFound` at once.
    ///
    /// Raises `StorageError`.
    fn delete(&self, py: Python<'_>) -> PyResult<bool> {
        let pool = self.pool.clone();
        wait(py, self.inline, Signals::Checked, async move {
            pool.delete().await
        })
    }

    /// Borrows the lowest free slot (or the `slots` lowest, as one lease)
    /// for `ttl` seconds, waiting up to `wait` seconds for it to free up;
    /// returns the `Lease`, a context manager that returns it when the
    /// `with` block ends.
    ///
    /// `ttl` must be above zero; both are clamped to the library's limits
    /// (`inf` is the longest allowed). With a `key`, a borrow made while
    /// the key's lease is active returns that same lease (a safe retry).
    /// `owner` labels the lease in `holders()`. A draining pool raises
    /// `Draining` at once unless `wait_while_draining`. The lease is bound
    /// to the store's session: it frees when this process dies.
    ///
    /// The GIL is released while it waits; Ctrl-C raises
    /// `KeyboardInterrupt`, and the interrupted borrow takes nothing.
    ///
    /// Raises `Exhausted` (no slot within `wait`), `InvalidArgument` (field
    /// `ttl`, `wait`, `slots`, `key` or `owner`), `PoolNotFound`,
    /// `Draining`, `KeyReused` or `StorageError`.
    #[pyo3(signature = (ttl, wait = 0.0, *, slots = 1, key = None, owner = None, wait_while_draining = false))]
    #[allow(clippy::too_many_arguments)] // Python's keyword arguments
    fn borrow(
        &self,
        py: Python<'_>,
        ttl: f64,
        wait: f64,
        #[pyo3(from_py_with = crate::numbers::slots)] slots: u32,
        key: Option<String>,
        owner: Option<String>,
        wait_while_draining: bool,
    ) -> PyResult<Lease> {
        let (ttl, wait) = (seconds(py, "ttl", ttl)?, seconds(py, "wait", wait)?);
        let options = options(slots, key, owner, wait_while_draining);
        let borrowed = self.pool.borrow_owned_with(ttl, wait, options);
        let guard = crate::runtime::wait(py, self.inline, Signals::Checked, borrowed)?;
        Ok(Lease::new(guard, self.inline))
    }

    /// `borrow` for asyncio: `lease = await pool.borrow_async(...)`, or
    /// `async with pool.borrow_async(...) as lease:`, which returns the
    /// lease when the block ends. Same arguments and errors. Cancelling the
    /// awaiting task while it waits takes nothing; a lease granted
    /// just as it was cancelled is returned at once.
    #[pyo3(signature = (ttl, wait = 0.0, *, slots = 1, key = None, owner = None, wait_while_draining = false))]
    #[allow(clippy::too_many_arguments)] // Python's keyword arguments
    fn borrow_async(
        &self,
        py: Python<'_>,
        ttl: f64,
        wait: f64,
        #[pyo3(from_py_with = crate::numbers::slots)] slots: u32,
        key: Option<String>,
        owner: Option<String>,
        wait_while_draining: bool,
    ) -> PyResult<BorrowAsync> {
        let (ttl, wait) = (seconds(py, "ttl", ttl)?, seconds(py, "wait", wait)?);
        let options = options(slots, key, owner, wait_while_draining);
        let (pool, inline) = (self.pool.clone(), self.inline);
        Ok(BorrowAsync::new(move || {
            let (pool, options) = (pool.clone(), options.clone());
            Box::pin(async move {
                let guard = pool.borrow_owned_with(ttl, wait, options).await?;
                Ok(granted(Lease::new(guard, inline)))
            })
        }))
    }

    /// Every active lease of the pool, by position, with its owner label
    /// and key: an admin's listing (it shows lease ids, the credential
    /// that returns a lease).
    ///
    /// Raises `PoolNotFound` or `StorageError`.
    fn holders(&self, py: Python<'_>) -> PyResult<Vec<Holder>> {
        let pool = self.pool.clone();
        wait(py, self.inline, Signals::Checked, async move {
            let holders = pool.holders().await?;
            Ok(holders.into_iter().map(Holder::from).collect())
        })
    }

    /// Ends the lease at `position`, whoever holds it: the slot is free at
    /// once. Returns the `Holder` it ended, or `None` if no lease held it.
    /// Its holder learns at its next renewal (`lost()`).
    ///
    /// Raises `PoolNotFound` or `StorageError`.
    fn force_return(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = crate::numbers::position)] position: u32,
    ) -> PyResult<Option<Holder>> {
        let pool = self.pool.clone();
        wait(py, self.inline, Signals::Checked, async move {
            Ok(pool.force_return(position).await?.map(Holder::from))
        })
    }

    /// Starts (`True`, the default) or ends (`False`) the pool's drain;
    /// returns its state. While it drains, the pool grants nothing new
    /// (borrows raise `Draining`); returns and renewals go on. Every
    /// process sharing the store sees it.
    ///
    /// Raises `PoolNotFound` or `StorageError`.
    #[pyo3(signature = (draining = true))]
    fn drain(&self, py: Python<'_>, draining: bool) -> PyResult<PoolState> {
        let pool = self.pool.clone();
        wait(py, self.inline, Signals::Checked, async move {
            pool.set_draining(draining).await.map(PoolState::from)
        })
    }

    /// Returns the lease with id `lease` (a UUID string, as `Lease.id` or
    /// `forget()` gave it); `True` if it was active, `False` ever after.
    ///
    /// Raises `InvalidArgument` (field `lease`) or `StorageError`.
    fn return_lease(&self, py: Python<'_>, lease: &str) -> PyResult<bool> {
        let id = lease_id(py, lease)?;
        let pool = self.pool.clone();
        wait(py, self.inline, Signals::Deferred, async move {
            pool.return_lease(id).await
        })
    }

    /// How many borrowers of this process wait on the pool now.
    fn waiting(&self) -> usize {
        self.pool.waiting().count
    }

    /// `register` for asyncio.
    fn register_async<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = crate::numbers::count)] count: u32,
    ) -> PyResult<Bound<'py, PyAny>> {
        let pool = self.pool.clone();
        awaitable(py, async move {
            pool.register(count).await.map(PoolState::from)
        })
    }

    /// `inspect` for asyncio.
    fn inspect_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let pool = self.pool.clone();
        awaitable(py, async move { pool.inspect().await.map(PoolState::from) })
    }

    /// `delete` for asyncio.
    fn delete_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let pool = self.pool.clone();
        awaitable(py, async move { pool.delete().await })
    }

    /// `holders` for asyncio.
    fn holders_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let pool = self.pool.clone();
        awaitable(py, async move {
            let holders = pool.holders().await?;
            Ok(holders.into_iter().map(Holder::from).collect::<Vec<_>>())
        })
    }

    /// `force_return` for asyncio.
    fn force_return_async<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = crate::numbers::position)] position: u32,
    ) -> PyResult<Bound<'py, PyAny>> {
        let pool = self.pool.clone();
        awaitable(py, async move {
            Ok(pool.force_return(position).await?.map(Holder::from))
        })
    }

    /// `drain` for asyncio.
    #[pyo3(signature = (draining = true))]
    fn drain_async<'py>(&self, py: Python<'py>, draining: bool) -> PyResult<Bound<'py, PyAny>> {
        let pool = self.pool.clone();
        awaitable(py, async move {
            pool.set_draining(draining).await.map(PoolState::from)
        })
    }

    /// `return_lease` for asyncio; the return runs to its end even if the
    /// awaiting task is cancelled.
    fn return_lease_async<'py>(&self, py: Python<'py>, lease: &str) -> PyResult<Bound<'py, PyAny>> {
        let id = lease_id(py, lease)?;
        let pool = self.pool.clone();
        awaitable_to_end(py, async move { pool.return_lease(id).await })
    }

    fn __repr__(&self) -> String {
        match &self.name {
            Some(name) => format!("<semaphore_pool.Pool {name:?} ({})>", self.pool.id()),
            None => format!("<semaphore_pool.Pool {}>", self.pool.id()),
        }
    }
}

/// `lease` as a lease id.
fn lease_id(py: Python<'_>, lease: &str) -> PyResult<LeaseId> {
    lease.parse().map_err(|_| {
        crate::errors::invalid(
            py,
            "lease",
            "a lease id (a UUID string)",
            format!("{lease:?}"),
        )
    })
}
