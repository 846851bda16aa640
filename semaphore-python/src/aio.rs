//! asyncio awaitables of library calls, run on the module's runtime.

use std::future::Future;

use pyo3::prelude::*;

use crate::errors::Answer;
use crate::runtime::runtime;
use crate::semaphore::{self, Error};

/// An asyncio awaitable of `call`, which runs on the module's runtime.
/// Cancelling the awaitable drops `call` (for a borrow: it takes nothing).
/// Must be called with an asyncio event loop running.
pub(crate) fn awaitable<'py, T>(
    py: Python<'py>,
    call: impl Future<Output = semaphore::Result<T>> + Send + 'static,
) -> PyResult<Bound<'py, PyAny>>
where
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    crate::runtime::share_with_asyncio()?;
    pyo3_async_runtimes::tokio::future_into_py(py, async move { Ok(Answer(call.await)) })
}

/// [`awaitable`], but `call` runs to its end even if the awaitable is
/// cancelled: for a return, which must not be left half done.
pub(crate) fn awaitable_to_end<'py, T>(
    py: Python<'py>,
    call: impl Future<Output = semaphore::Result<T>> + Send + 'static,
) -> PyResult<Bound<'py, PyAny>>
where
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    let task = runtime().spawn(call);
    awaitable(py, async move {
        task.await.unwrap_or_else(|failed| {
            Err(Error::Storage {
                operation: "return",
                retryable: false,
                source: Box::new(failed),
            })
        })
    })
}
