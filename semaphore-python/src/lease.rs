//! `Lease`: a held lease, returned when its `with` block ends or when it
//! is garbage-collected (the library's guard).

use std::sync::Arc;

use pyo3::exceptions::PyBaseException;
use pyo3::prelude::*;

use crate::aio::{awaitable, awaitable_to_end};
use crate::errors::exception;
use crate::held::{Cell, Held};
use crate::info::LeaseInfo;
use crate::runtime::{Signals, runtime, wait};
use crate::semaphore::{self, Error, OwnedLeaseGuard};
use crate::time::{maybe_seconds, seconds, unix_seconds};

/// A held lease: one or more slots of a pool, with a fencing token and an
/// expiry. Returned when its `with` (or `async with`) block ends, on an
/// exception too, by `release()`, or when the object is garbage-collected;
/// `forget()` keeps it to its ttl instead.
///
/// Bound to its store's session: it frees when this process dies
/// (SQLite: at once; PostgreSQL, Redis, MySQL: within the session timeout).
/// Check `is_held()` right before each act on the resource it guards, and
/// pass `token` along to it.
#[pyclass(module = "semaphore_pool", frozen)]
pub(crate) struct Lease {
    held: Held<OwnedLeaseGuard>,
    /// The lease as granted.
    granted: semaphore::Lease,
}

impl Lease {
    pub(crate) fn new(guard: OwnedLeaseGuard, inline: bool) -> Self {
        let granted = guard.lease().clone();
        Self {
            held: Held::new(guard, inline),
            granted,
        }
    }

    /// The error for a call on a lease this object no longer holds.
    fn gone(&self) -> Error {
        not_held(&self.granted)
    }
}

fn not_held(lease: &semaphore::Lease) -> Error {
    Error::LeaseNotFound {
        pool: lease.pool,
        lease: lease.id,
    }
}

/// Returns the lease in `cell`, if it still holds one: `true` if it was
/// active.
async fn release(cell: Cell<OwnedLeaseGuard>) -> semaphore::Result<bool> {
    let guard = cell.lock().await.take();
    match guard {
        Some(guard) => guard.release().await,
        None => Ok(false),
    }
}

/// Renews the lease in `cell` to `ttl` from now.
async fn renew(
    cell: Cell<OwnedLeaseGuard>,
    ttl: std::time::Duration,
    gone: Error,
) -> semaphore::Result<()> {
    let mut guard = cell.lock().await;
    match guard.as_mut() {
        Some(guard) => guard.renew(ttl).await,
        None => Err(gone),
    }
}

/// The lease's lost signal, as a future that borrows nothing.
fn watch_lost(guard: &OwnedLeaseGuard) -> BoxFuture<Arc<Error>> {
    Box::pin(guard.lost())
}

/// A boxed, sendable future.
type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'static>>;

/// A lease's lost reason, handed to Python as the exception instance (not
/// raised).
struct Lost(Arc<Error>);

impl<'py> IntoPyObject<'py> for Lost {
    type Target = PyBaseException;
    type Output = Bound<'py, PyBaseException>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Self::Output> {
        Ok(exception(py, &self.0).into_value(py).into_bound(py))
    }
}

#[pymethods]
impl Lease {
    /// The lease's id, a UUID string: the credential that returns it
    /// (`Pool.return_lease`). Keep it private.
    #[getter]
    fn id(&self) -> String {
        self.granted.id.to_string()
    }

    /// The pool's id, a UUID string.
    #[getter]
    fn pool(&self) -> String {
        self.granted.pool.to_string()
    }

    /// The slot's number (the lowest of `positions`), `0..count`.
    #[getter]
    fn position(&self) -> u32 {
        self.granted.position
    }

    /// Every position the lease holds, lowest first.
    #[getter]
    fn positions(&self) -> Vec<u32> {
        self.granted.positions.to_vec()
    }

    /// The number of slots the lease holds.
    #[getter]
    fn slots(&self) -> u32 {
        self.granted.slots()
    }

    /// The fencing token: above every token granted before on its
    /// positions. Pass it to the resource you protect.
    #[getter]
    fn token(&self) -> u64 {
        self.granted.token
    }

    /// When the lease frees itself, in unix seconds: as granted or last
    /// renewed by `renew()` (keep-alive renewals show in `time_left()`).
    #[getter]
    fn expires_at(&self, py: Python<'_>) -> f64 {
        let at = self
            .held
            .with(py, |guard| guard.as_ref().map(|g| g.expires_at));
        unix_seconds(at.unwrap_or(self.granted.expires_at))
    }

    /// The lease's data now, as a `LeaseInfo`.
    #[getter]
    fn info(&self, py: Python<'_>) -> LeaseInfo {
        let now = self.held.with(py, |guard| {
            guard.as_ref().map(|g| LeaseInfo::from(g.lease()))
        });
        now.unwrap_or_else(|| LeaseInfo::from(&self.granted))
    }

    /// Whether the lease is still certainly held, decided without I/O:
    /// `False` once it was returned or forgotten here, once it
    /// expired by the store's clock, once its session can no longer vouch
    /// for it, or once a keep-alive renewal found it lost. It turns `False`
    /// no later than anyone else can be granted its slots.
    fn is_held(&self, py: Python<'_>) -> bool {
        self.held
            .with(py, |guard| guard.as_ref().is_some_and(|g| g.is_held()))
    }

    /// Whether a keep-alive renewal found the lease lost (always `False`
    /// without `keep_alive()`).
    fn is_lost(&self, py: Python<'_>) -> bool {
        self.held
            .with(py, |guard| guard.as_ref().is_some_and(|g| g.is_lost()))
    }

    /// Seconds left before the lease may be lost (following keep-alive
    /// renewals; for a lease bound to a networked store's session, no
    /// later than that session's end as of its last heartbeat); 0 once
    /// `is_held()` is `False`.
    fn time_left(&self, py: Python<'_>) -> f64 {
        self.held.with(py, |guard| {
            guard.as_ref().map_or(0.0, |g| g.time_left().as_secs_f64())
        })
    }

    /// Extends the lease to expire `ttl` seconds from now, keeping its
    /// position and token.
    ///
    /// Raises `LeaseExpired` (too late), `LeaseNotFound` (returned,
    /// force-returned, or its pool deleted and registered again),
    /// `SessionLost`, `PoolNotFound`, `InvalidArgument` (field `ttl`) or
    /// `StorageError`; the lease is unchanged then.
    fn renew(&self, py: Python<'_>, ttl: f64) -> PyResult<()> {
        let ttl = seconds(py, "ttl", ttl)?;
        let call = renew(self.held.cell(), ttl, self.gone());
        wait(py, self.held.inline, Signals::Checked, call)
    }

    /// `renew` for asyncio.
    fn renew_async<'py>(&self, py: Python<'py>, ttl: f64) -> PyResult<Bound<'py, PyAny>> {
        let ttl = seconds(py, "ttl", ttl)?;
        awaitable(py, renew(self.held.cell(), ttl, self.gone()))
    }

    /// Returns the lease now; `True` if it was still active (`False` if it
    /// had expired, was force-returned, or was already returned here).
    ///
    /// Raises `StorageError` if the store failed; the lease is then left to
    /// its ttl (a bound lease also ends with its store's session).
    fn release(&self, py: Python<'_>) -> PyResult<bool> {
        wait(
            py,
            self.held.inline,
            Signals::Deferred,
            release(self.held.cell()),
        )
    }

    /// `release` for asyncio; the return runs to its end even if the
    /// awaiting task is cancelled.
    fn release_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        awaitable_to_end(py, release(self.held.cell()))
    }

    /// Keeps the lease alive while this object lives: a background renewal
    /// to its ttl every ttl/3, keeping position and token. When a renewal
    /// finds it lost (force-returned, pool deleted, expired or its session
    /// lost while the store was out of reach), `is_lost()` and `lost()`
    /// say so and `is_held()` turns `False`. Calling it again changes
    /// nothing.
    fn keep_alive(&self, py: Python<'_>) {
        self.held.with(py, |guard| {
            if let Some(guard) = guard {
                let _entered = runtime().enter();
                guard.keep_alive();
            }
        });
    }

    /// An asyncio awaitable that resolves, when the lease is lost, to the
    /// reason: an exception instance (not raised), `LeaseExpired` at its
    /// expiry, `SessionLost`, `LeaseNotFound` (force-returned, or returned
    /// here), `PoolNotFound` or a `StorageError`. Await it beside the
    /// work (`asyncio.wait`, a `TaskGroup`); cancelling it changes nothing.
    fn lost<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let watch = self.held.with(py, |guard| guard.as_ref().map(watch_lost));
        let gone = self.gone();
        awaitable(py, async move {
            Ok(Lost(match watch {
                Some(watch) => watch.await,
                None => Arc::new(gone),
            }))
        })
    }

    /// Blocks until the lease is lost, for at most `timeout` seconds
    /// (`None`: no limit), and returns the reason as `lost()` does, or
    /// `None` if the timeout passed first. Releases the GIL while it waits;
    /// Ctrl-C interrupts it.
    #[pyo3(signature = (timeout = None))]
    fn wait_lost(
        &self,
        py: Python<'_>,
        timeout: Option<f64>,
    ) -> PyResult<Option<Py<PyBaseException>>> {
        let timeout = maybe_seconds(py, "timeout", timeout)?;
        let watch = self.held.with(py, |guard| guard.as_ref().map(watch_lost));
        let gone = self.gone();
        let reason = wait(py, false, Signals::Checked, async move {
            let lost = async move {
                match watch {
                    Some(watch) => watch.await,
                    None => Arc::new(gone),
                }
            };
            Ok(match timeout {
                Some(timeout) => tokio::time::timeout(timeout, lost).await.ok(),
                None => Some(lost.await),
            })
        })?;
        Ok(reason.map(|reason| exception(py, &reason).into_value(py)))
    }

    /// Keeps the lease until its ttl instead of returning it, unbound from
    /// this process (it outlives the process and the store handle), and
    /// returns its data; return it early with `Pool.return_lease(info.id)`.
    ///
    /// Raises `LeaseNotFound` if it was already returned or forgotten here.
    fn forget(&self, py: Python<'_>) -> PyResult<LeaseInfo> {
        let Some(guard) = self.held.with(py, Option::take) else {
            return Err(crate::errors::to_py(py, self.gone()));
        };
        let lease = py.detach(|| {
            let _entered = runtime().enter();
            guard.forget()
        });
        Ok(LeaseInfo::from(&lease))
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Returns the lease. A failed return is raised unless an exception is
    /// already on its way out of the block (which then wins).
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
        awaitable(py, async move { Ok(slf) })
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
        format!(
            "<semaphore_pool.Lease position={} token={} pool={}>",
            self.granted.position, self.granted.token, self.granted.pool
        )
    }
}
