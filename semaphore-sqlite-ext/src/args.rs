//! The functions' arguments, read and checked: an argument of the wrong
//! type or range fails the call with a message that names it and says
//! what it takes, never a panic.

use std::time::Duration;

use semaphore_sqlite::rusqlite::functions::Context;
use semaphore_sqlite::rusqlite::types::ValueRef;
use semaphore_sqlite::rusqlite::{self, ffi};
use semaphore_sqlite::{LeaseId, PoolId};

/// An error of argument `name`: it takes `allowed`.
pub(crate) fn invalid(function: &str, name: &str, allowed: &str) -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(
        ffi::Error::new(ffi::SQLITE_ERROR),
        Some(format!("semaphore: {function}: `{name}` takes {allowed}")),
    )
}

/// Argument `i`, named `name`, if given and not NULL.
fn given<'a>(ctx: &'a Context<'_>, i: usize) -> Option<ValueRef<'a>> {
    (i < ctx.len())
        .then(|| ctx.get_raw(i))
        .filter(|v| !matches!(v, ValueRef::Null))
}

/// A pool: its UUID as text, or a name, whose id is
/// [`PoolId::from_name`] of it (as the Rust API, the CLI and the HTTP
/// service name pools).
pub(crate) fn pool(ctx: &Context<'_>, i: usize, function: &str) -> rusqlite::Result<PoolId> {
    let allowed = "a pool's name or UUID, as text";
    match given(ctx, i) {
        Some(ValueRef::Text(text)) => {
            let text = std::str::from_utf8(text)
                .map_err(|_| invalid(function, "pool", "text in UTF-8 (a pool's name or UUID)"))?;
            if text.is_empty() {
                return Err(invalid(function, "pool", allowed));
            }
            Ok(uuid::Uuid::try_parse(text)
                .map_or_else(|_| PoolId::from_name(text), PoolId::from_uuid))
        }
        _ => Err(invalid(function, "pool", allowed)),
    }
}

/// A lease's id, as the borrow answered it (UUID text).
pub(crate) fn lease(ctx: &Context<'_>, i: usize, function: &str) -> rusqlite::Result<LeaseId> {
    let allowed = "a lease id (the `lease` of a borrow's answer), as text";
    match given(ctx, i) {
        Some(ValueRef::Text(text)) => std::str::from_utf8(text)
            .ok()
            .and_then(|t| uuid::Uuid::try_parse(t).ok())
            .map(LeaseId::from_uuid)
            .ok_or_else(|| invalid(function, "lease", allowed)),
        _ => Err(invalid(function, "lease", allowed)),
    }
}

/// An integer argument within `range`; `None` if NULL or not given and
/// `optional`.
pub(crate) fn integer(
    ctx: &Context<'_>,
    i: usize,
    function: &str,
    name: &str,
    range: std::ops::RangeInclusive<i64>,
) -> rusqlite::Result<Option<i64>> {
    let allowed = format!("an integer from {} to {}", range.start(), range.end());
    match given(ctx, i) {
        None => Ok(None),
        Some(ValueRef::Integer(n)) if range.contains(&n) => Ok(Some(n)),
        Some(_) => Err(invalid(function, name, &allowed)),
    }
}

/// A required integer within `range`.
pub(crate) fn required(
    ctx: &Context<'_>,
    i: usize,
    function: &str,
    name: &str,
    range: std::ops::RangeInclusive<i64>,
) -> rusqlite::Result<i64> {
    let allowed = format!("an integer from {} to {}", range.start(), range.end());
    integer(ctx, i, function, name, range)?.ok_or_else(|| invalid(function, name, &allowed))
}

/// A ttl in milliseconds, above zero (the store caps it at the limits'
/// `max_ttl`, 24 hours by default).
pub(crate) fn ttl(ctx: &Context<'_>, i: usize, function: &str) -> rusqlite::Result<Duration> {
    let allowed = "an integer of 1 or more milliseconds (above 24 hours is capped)";
    match given(ctx, i) {
        Some(ValueRef::Integer(ms)) if ms > 0 => Ok(Duration::from_millis(ms.unsigned_abs())),
        _ => Err(invalid(function, "ttl_ms", allowed)),
    }
}

/// Optional text (an owner label, a key); the store checks its content.
pub(crate) fn text(
    ctx: &Context<'_>,
    i: usize,
    function: &str,
    name: &str,
) -> rusqlite::Result<Option<String>> {
    match given(ctx, i) {
        None => Ok(None),
        Some(ValueRef::Text(text)) => std::str::from_utf8(text)
            .map(|t| Some(t.to_owned()))
            .map_err(|_| invalid(function, name, "UTF-8 text")),
        Some(_) => Err(invalid(function, name, "text")),
    }
}
