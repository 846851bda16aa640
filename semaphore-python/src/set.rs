//! `PoolSet` (several pools borrowed from together, all or nothing) and
//! `LeaseSet` (what it grants).

use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::aio::awaitable_to_end;
use crate::borrow::{BorrowAsync, granted};
use crate::errors::to_py;
use crate::held::{Cell, Held};
use crate::info::LeaseInfo;
use crate::pool::{Pool, options};
use crate::runtime::{Signals, runtime, wait};
use crate::semaphore;
use crate::time::seconds;

/// Several pools of one store, borrowed from together: one slot of each
/// (or a weight of each, `PoolSet.weighted`), all or nothing, under one
/// wait. No borrower ever holds some while waiting for the rest, so two
/// borrowers naming the same pools in different orders cannot deadlock.
///
/// Raises `InvalidArgument` (field `pools`) for no pools, pools of
/// different stores, or a pool named twice.
#[pyclass(module = "semaphore_pool", frozen)]
pub(crate) struct PoolSet {
    set: semaphore::PoolSet,
    inline: bool,
}

impl PoolSet {
    fn made(
        py: Python<'_>,
        set: semaphore::Result<semaphore::PoolSet>,
        inline: bool,
    ) -> PyResult<Self> {
        let set = set.map_err(|e| to_py(py, e))?;
        Ok(Self { set, inline })
    }
}

#[pymethods]
impl PoolSet {
    #[new]
    fn new(py: Python<'_>, pools: Vec<Bound<'_, Pool>>) -> PyResult<Self> {
        let inline = pools.iter().all(|p| p.get().inline);
        let set = semaphore::PoolSet::new(pools.iter().map(|p| p.get().pool.clone()));
        Self::made(py, set, inline)
    }

    /// The set of `(pool, slots)` pairs: `slots` slots of each pool, as one
    /// lease per pool, all or nothing. Raises `InvalidArgument` as the
    /// constructor does, or naming `slots`.
    #[staticmethod]
    fn weighted(py: Python<'_>, pools: Vec<(Bound<'_, Pool>, Bound<'_, PyAny>)>) -> PyResult<Self> {
        let inline = pools.iter().all(|(p, _)| p.get().inline);
        let weights = pools
            .iter()
            .map(|(_, n)| crate::numbers::slots(n))
            .collect::<PyResult<Vec<u32>>>()?;
        let set = semaphore::PoolSet::weighted(
            pools
                .iter()
                .zip(weights)
                .map(|((p, _), n)| (p.get().pool.clone(), n)),
        );
        Self::made(py, set, inline)
    }

    /// The pools' ids, in the set's order.
    #[getter]
    fn ids(&self) -> Vec<String> {
        self.set.ids().iter().map(ToString::to_string).collect()
    }

    /// Borrows one slot of every pool (its weight, for a weighted set), all
    /// or nothing, each for `ttl` seconds, waiting up to `wait` seconds in
    /// all; returns the `LeaseSet`, a context manager that returns them
    /// all when the block ends. Arguments as `Pool.borrow` (`slots` is the
    /// weight of pools that `weighted` gave none). The GIL is released
    /// while it waits; Ctrl-C interrupts it and it takes nothing.
    ///
    /// Raises `Exhausted` (naming the first pool), `PoolNotFound`,
    /// `InvalidArgument`, `Draining` or `StorageError`.
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
    ) -> PyResult<LeaseSet> {
        let (ttl, wait) = (seconds(py, "ttl", ttl)?, seconds(py, "wait", wait)?);
        let options = options(slots, key, owner, wait_while_draining);
        let set = self.set.clone();
        let borrowed = async move { set.borrow_with(ttl, wait, options).await };
        let leases = crate::runtime::wait(py, self.inline, Signals::Checked, borrowed)?;
        Ok(LeaseSet::new(leases, self.inline))
    }

    /// `borrow` for asyncio: await it, or use it in `async with`. Same
    /// arguments and errors; a cancelled borrow takes nothing.
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
        let (set, inline) = (self.set.clone(), self.inline);
        Ok(BorrowAsync::new(move || {
            let (set, options) = (set.clone(), options.clone());
            Box::pin(async move {
                let leases = set.borrow_with(ttl, wait, options).await?;
                Ok(granted(LeaseSet::new(leases, inline)))
            })
        }))
    }

    fn __repr__(&self) -> String {
        format!("<semaphore_pool.PoolSet of {} pools>", self.set.ids().len())
    }
}

/// The leases of one `PoolSet.borrow`, one per pool in the set's order,
/// all returned when the `with` block ends, by `release()`, or when the
/// object is garbage-collected. Indexing and iterating give `LeaseInfo`s.
#[pyclass(module = "semaphore_pool", frozen, sequence)]
pub(crate) struct LeaseSet {
    held: Held<semaphore::LeaseSet>,
    /// The leases as granted.
    granted: Vec<semaphore::Lease>,
}

impl LeaseSet {
    fn new(leases: semaphore::LeaseSet, inline: bool) -> Self {
        let granted = leases.to_vec();
        Self {
            held: Held::new(leases, inline),
            granted,
        }
    }
}

/// Returns every lease in `cell`, if it still holds them: `true` if all
/// were active.
async fn release(cell: Cell<semaphore::LeaseSet>) -> semaphore::Result<bool> {
    let leases = cell.lock().await.take();
    match leases {
        Some(leases) => leases.release().await,
        None => Ok(false),
    }
}

#[pymethods]
impl LeaseSet {
    /// The leases, one per pool, in the set's order.
    #[getter]
    fn leases(&self) -> Vec<LeaseInfo> {
        self.granted.iter().map(LeaseInfo::from).collect()
    }

    fn __len__(&self) -> usize {
        self.granted.len()
    }

    fn __getitem__(&self, index: isize) -> PyResult<LeaseInfo> {
        let len = self.granted.len() as isize;
        let at = if index < 0 { index + len } else { index };
        if !(0..len).contains(&at) {
            return Err(pyo3::exceptions::PyIndexError::new_err(
                "lease index out of range",
            ));
        }
        Ok(LeaseInfo::from(&self.granted[at as usize]))
    }

    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(PyList::new(py, self.leases())?.try_iter()?.into_any())
    }

    /// Returns every lease now; `True` only if all were still active.
    /// Raises `StorageError`; the leases not yet returned are then left to
    /// their ttl.
    fn release(&self, py: Python<'_>) -> PyResult<bool> {
        wait(
            py,
            self.held.inline,
            Signals::Deferred,
            release(self.held.cell()),
        )
    }

    /// `release` for asyncio; it runs to its end even if the awaiting task
    /// is cancelled.
    fn release_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        awaitable_to_end(py, release(self.held.cell()))
    }

    /// Keeps the leases until their ttl, unbound from this process, and
    /// returns their data. Raises `LeaseNotFound` if already returned or
    /// forgotten.
    fn forget(&self, py: Python<'_>) -> PyResult<Vec<LeaseInfo>> {
        let Some(leases) = self.held.with(py, Option::take) else {
            let first = &self.granted[0];
            let gone = semaphore::Error::LeaseNotFound {
                pool: first.pool,
                lease: first.id,
            };
            return Err(to_py(py, gone));
        };
        let leases = py.detach(|| {
            let _entered = runtime().enter();
            leases.forget()
        });
        Ok(leases.iter().map(LeaseInfo::from).collect())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Returns the leases; a failed return is raised unless an exception
    /// is already on its way out of the block.
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<Bound<'_, PyAny>>,
        _exc: Option<Bound<'_, PyAny>>,
        _traceback: Option<Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        match self.release(py) {
            Err(failed) if exc_type.is_none() => Err(failed),
            _ => Ok(false),
        }
    }

    fn __aenter__<'py>(slf: Py<Self>, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        crate::aio::awaitable(py, async move { Ok(slf) })
    }

    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        exc_type: Option<Bound<'py, PyAny>>,
        _exc: Option<Bound<'py, PyAny>>,
        _traceback: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let in_flight = exc_type.is_some();
        let cell = self.held.cell();
        awaitable_to_end(py, async move {
            match release(cell).await {
                Err(failed) if !in_flight => Err(failed),
                _ => Ok(false),
            }
        })
    }

    fn __repr__(&self) -> String {
        let positions: Vec<u32> = self.granted.iter().map(|l| l.position).collect();
        format!("<semaphore_pool.LeaseSet positions={positions:?}>")
    }
}
