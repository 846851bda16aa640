//! Seconds, as Python passes them (an int or a float), and instants as
//! unix seconds.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pyo3::prelude::*;

use crate::errors::invalid;

/// `seconds` (an int or a float) as a duration. `inf`, and any number
/// of seconds past the longest duration there is (about 1.8e19 s), is that
/// longest, which the library then clamps to its limit (`max_ttl`,
/// `max_wait`), as it clamps any other too long (R5).
///
/// # Errors
/// `InvalidArgument` naming `field` for a negative number or NaN.
pub(crate) fn seconds(py: Python<'_>, field: &'static str, seconds: f64) -> PyResult<Duration> {
    if seconds >= Duration::MAX.as_secs_f64() {
        return Ok(Duration::MAX);
    }
    Duration::try_from_secs_f64(seconds).map_err(|_| {
        invalid(
            py,
            field,
            "a number of seconds, zero or more (inf: the longest allowed)",
            seconds.to_string(),
        )
    })
}

/// `seconds` if given, as [`seconds`] reads it.
pub(crate) fn maybe_seconds(
    py: Python<'_>,
    field: &'static str,
    seconds: Option<f64>,
) -> PyResult<Option<Duration>> {
    seconds.map(|s| self::seconds(py, field, s)).transpose()
}

/// `at` in seconds since the unix epoch (negative before it).
pub(crate) fn unix_seconds(at: SystemTime) -> f64 {
    match at.duration_since(UNIX_EPOCH) {
        Ok(after) => after.as_secs_f64(),
        Err(before) => -before.duration().as_secs_f64(),
    }
}
