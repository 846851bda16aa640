//! The library's errors as the exception classes of
//! `semaphore_pool._errors` (its docstring has the table), and an answer
//! type whose error becomes the exception only once the GIL is held.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyFloat, PyModule, PyString};
use pyo3::{IntoPyObject, IntoPyObjectExt};

use crate::semaphore::Error;

/// The module that defines the exception classes.
fn classes(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    MODULE
        .get_or_try_init(py, || Ok(py.import("semaphore_pool._errors")?.unbind()))
        .map(|module| module.bind(py))
}

/// An instance of exception class `class` with `message`, its fields set
/// as attributes.
fn raise(py: Python<'_>, class: &str, message: String, fields: &[(&str, Py<PyAny>)]) -> PyErr {
    let made = (|| -> PyResult<PyErr> {
        let kwargs = PyDict::new(py);
        for (name, value) in fields {
            kwargs.set_item(name, value)?;
        }
        let instance = classes(py)?
            .getattr(class)?
            .call((message,), Some(&kwargs))?;
        Ok(PyErr::from_value(instance))
    })();
    made.unwrap_or_else(|failed| failed)
}

/// A `SemaphoreError` with `message` and no fields.
pub(crate) fn base_error(message: &str) -> PyErr {
    Python::attach(|py| raise(py, "SemaphoreError", message.to_string(), &[]))
}

/// An `InvalidArgument` naming `field`, for a check made in this module
/// (seconds that are not a number of seconds).
pub(crate) fn invalid(py: Python<'_>, field: &'static str, allowed: &str, got: String) -> PyErr {
    to_py(
        py,
        Error::InvalidArgument {
            field,
            allowed: allowed.to_string(),
            got,
        },
    )
}

/// `error` as its exception class, with its fields as attributes and
/// `retryable` on every one.
pub(crate) fn to_py(py: Python<'_>, error: Error) -> PyErr {
    exception(py, &error)
}

/// [`to_py`] for an error that is shared (a lease's lost reason).
pub(crate) fn exception(py: Python<'_>, error: &Error) -> PyErr {
    let message = error.chain().to_string();
    let text = |s: &str| PyString::new(py, s).into_any().unbind();
    let mut fields: Vec<(&str, Py<PyAny>)> = Vec::new();
    let retryable = error.is_retryable();
    let class = match error {
        Error::InvalidArgument {
            field,
            allowed,
            got,
        } => {
            fields.push(("field", text(field)));
            fields.push(("allowed", text(allowed)));
            fields.push(("got", text(got)));
            "InvalidArgument"
        }
        Error::PoolNotFound { pool } => {
            fields.push(("pool", text(&pool.to_string())));
            "PoolNotFound"
        }
        Error::Exhausted { pool, waited } => {
            fields.push(("pool", text(&pool.to_string())));
            fields.push(("waited", number(py, waited.as_secs_f64())));
            "Exhausted"
        }
        Error::Draining { pool } => {
            fields.push(("pool", text(&pool.to_string())));
            "Draining"
        }
        Error::KeyReused { pool } => {
            fields.push(("pool", text(&pool.to_string())));
            "KeyReused"
        }
        Error::LeaseExpired {
            pool,
            lease,
            expired_at,
        } => {
            fields.push(("pool", text(&pool.to_string())));
            fields.push(("lease", text(&lease.to_string())));
            // Unix seconds, to the millisecond a store keeps.
            let expired_at = crate::semaphore::store::unix_ms(*expired_at) as f64 / 1e3;
            fields.push(("expired_at", number(py, expired_at)));
            "LeaseExpired"
        }
        Error::LeaseNotFound { pool, lease } => {
            fields.push(("pool", text(&pool.to_string())));
            fields.push(("lease", text(&lease.to_string())));
            "LeaseNotFound"
        }
        Error::SessionLost { pool, lease } => {
            fields.push(("pool", text(&pool.to_string())));
            fields.push(("lease", text(&lease.to_string())));
            "SessionLost"
        }
        Error::SessionEnded { pool, lease } => {
            fields.push(("pool", text(&pool.to_string())));
            fields.push(("lease", text(&lease.to_string())));
            "SessionEnded"
        }
        Error::Storage { operation, .. } => {
            fields.push(("operation", text(operation)));
            "StorageError"
        }
        Error::SchemaMismatch { expected, found } => {
            fields.push(("operation", text("open")));
            fields.push(("expected", text(expected)));
            fields.push(("found", text(found)));
            "SchemaMismatch"
        }
        // ClockSkew, NoRuntime, BlockingInRuntime, Forked and any later
        // variant.
        _ => "SemaphoreError",
    };
    fields.push(("retryable", flag(py, retryable)));
    raise(py, class, message, &fields)
}

fn number(py: Python<'_>, value: f64) -> Py<PyAny> {
    PyFloat::new(py, value).into_any().unbind()
}

fn flag(py: Python<'_>, value: bool) -> Py<PyAny> {
    PyBool::new(py, value).to_owned().into_any().unbind()
}

/// The answer of a call run on the runtime for an asyncio awaitable:
/// converted to Python (the value, or the error's exception) where
/// `pyo3-async-runtimes` holds the GIL to set the awaitable's result.
pub(crate) struct Answer<T>(pub(crate) crate::semaphore::Result<T>);

impl<'py, T: IntoPyObject<'py>> IntoPyObject<'py> for Answer<T> {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Self::Output> {
        match self.0 {
            Ok(value) => value.into_bound_py_any(py),
            Err(error) => Err(to_py(py, error)),
        }
    }
}
