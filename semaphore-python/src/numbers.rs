//! Whole numbers, as Python passes them: any `int`, checked against the
//! range of the field it fills, so that one out of range is an
//! `InvalidArgument` naming the field (R14), not a bare `OverflowError`.

use pyo3::exceptions::PyOverflowError;
use pyo3::prelude::*;

use crate::errors::invalid;

/// `value` as a whole number for `field`, from 0 to `u32::MAX`.
///
/// # Errors
/// `InvalidArgument` naming `field` for an `int` out of that range;
/// `TypeError` (from PyO3) for what is not an `int`.
fn whole(value: &Bound<'_, PyAny>, field: &'static str) -> PyResult<u32> {
    value.extract::<u32>().map_err(|e| {
        let py = value.py();
        if !e.is_instance_of::<PyOverflowError>(py) {
            return e;
        }
        invalid(
            py,
            field,
            &format!("a whole number from 0 to {}", u32::MAX),
            value.to_string(),
        )
    })
}

/// A pool's `count`, for `from_py_with`.
pub(crate) fn count(value: &Bound<'_, PyAny>) -> PyResult<u32> {
    whole(value, "count")
}

/// A borrow's `slots`, for `from_py_with`.
pub(crate) fn slots(value: &Bound<'_, PyAny>) -> PyResult<u32> {
    whole(value, "slots")
}

/// A slot's `position`, for `from_py_with`.
pub(crate) fn position(value: &Bound<'_, PyAny>) -> PyResult<u32> {
    whole(value, "position")
}

/// A store's `pool_size`, for `from_py_with`.
pub(crate) fn pool_size(value: &Bound<'_, PyAny>) -> PyResult<Option<usize>> {
    if value.is_none() {
        return Ok(None);
    }
    whole(value, "pool_size").map(|n| Some(n as usize))
}
