//! `BorrowAsync`: what `borrow_async` hands back, to await or to enter
//! with `async with`.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;

use pyo3::PyClass;

use crate::aio::awaitable;
use crate::semaphore;

/// What an asyncio borrow grants (one pool's `Lease` or a set's
/// `LeaseSet`), made into its Python object once back on the interpreter.
pub(crate) type Granted =
    Box<dyn for<'py> FnOnce(Python<'py>) -> PyResult<Bound<'py, PyAny>> + Send>;

/// `value`, granted, as [`Granted`].
pub(crate) fn granted<T>(value: T) -> Granted
where
    T: PyClass + Into<pyo3::PyClassInitializer<T>> + Send + 'static,
{
    Box::new(move |py| Ok(Bound::new(py, value)?.into_any()))
}

/// A borrow call, started anew by each await.
type Start =
    Box<dyn Fn() -> Pin<Box<dyn Future<Output = semaphore::Result<Granted>> + Send>> + Send + Sync>;

/// Where `__aenter__` keeps what it granted, for `__aexit__`.
type Entered = Arc<Mutex<Option<Py<PyAny>>>>;

/// A borrow for asyncio, not started yet: `await` it for the lease (or
/// lease set), or use it in `async with`, which returns the lease when the
/// block ends, on an exception too. Each await starts a borrow of its own.
#[pyclass(module = "semaphore_pool", frozen)]
pub(crate) struct BorrowAsync {
    start: Start,
    entered: Entered,
}

impl BorrowAsync {
    pub(crate) fn new(
        start: impl Fn() -> Pin<Box<dyn Future<Output = semaphore::Result<Granted>> + Send>>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        Self {
            start: Box::new(start),
            entered: Arc::default(),
        }
    }

    /// The asyncio awaitable of one borrow; what it grants is kept in
    /// `entered`, if given, as it becomes a Python object.
    fn begin<'py>(&self, py: Python<'py>, entered: Option<Entered>) -> PyResult<Bound<'py, PyAny>> {
        let call = (self.start)();
        awaitable(py, async move {
            let granted = call.await?;
            Ok(Captured { granted, entered })
        })
    }
}

#[pymethods]
impl BorrowAsync {
    fn __await__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.begin(py, None)?.call_method0("__await__")
    }

    fn __aenter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.begin(py, Some(self.entered.clone()))
    }

    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        exc_type: Bound<'py, PyAny>,
        exc: Bound<'py, PyAny>,
        traceback: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let entered = self.entered.lock().ok().and_then(|mut e| e.take());
        match entered {
            Some(granted) => granted
                .bind(py)
                .call_method1("__aexit__", (exc_type, exc, traceback)),
            None => awaitable(py, async { Ok(false) }),
        }
    }
}

/// A grant on its way to Python, which keeps the Python object it
/// becomes in `entered`.
struct Captured {
    granted: Granted,
    entered: Option<Entered>,
}

impl<'py> IntoPyObject<'py> for Captured {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Self::Output> {
        let object = (self.granted)(py)?;
        if let Some(entered) = self.entered
            && let Ok(mut slot) = entered.lock()
        {
            *slot = Some(object.clone().unbind());
        }
        Ok(object)
    }
}
