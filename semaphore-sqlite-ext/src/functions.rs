//! The SQL functions, each a thin call of the store's primitive of the
//! same name on the caller's connection (`Attached`), answered as JSON.
//!
//! | function | answers |
//! | --- | --- |
//! | `semaphore_register(pool, count)` | the pool's state |
//! | `semaphore_inspect(pool)` | the pool's state |
//! | `semaphore_borrow(pool, ttl_ms [, slots [, owner [, key [, bound]]]])` | the lease, or NULL when no slot is free |
//! | `semaphore_return(pool, lease)` | 1 if the lease was active, else 0 |
//! | `semaphore_renew(pool, lease, ttl_ms)` | the lease, or NULL if it is not active |
//! | `semaphore_holders(pool [, with_leases])` | the active leases, lowest position first |
//! | `semaphore_force_return(pool, position)` | the holder ended, or NULL |
//! | `semaphore_next_expiry(pool)` | unix ms when the earliest active lease ends, or NULL |
//! | `semaphore_forget_statements()` | NULL; finalizes the statements kept prepared (see `state`) |

use std::sync::Arc;

use semaphore_sqlite::extension::Attached;
use semaphore_sqlite::rusqlite::functions::{Context, FunctionFlags};
use semaphore_sqlite::rusqlite::types::Value;
use semaphore_sqlite::rusqlite::{self, Connection, ffi};
use semaphore_sqlite::store::TryBorrow;
use semaphore_sqlite::{BorrowOptions, Error, Result};

use crate::state::{State, with_connection};
use crate::{args, json};

/// What a failed call reports: SQLite's own error (its code kept, so
/// `SQLITE_BUSY` stays `SQLITE_BUSY`, never a NULL "no slot") or the
/// store's, with the store's message.
///
/// SQLite's `SQLITE_BUSY`, `SQLITE_LOCKED` and `SQLITE_INTERRUPT` keep
/// their code, with SQLite's message for it ("database is locked"), for
/// callers that retry by code: `rusqlite` reports a function's error that
/// has a message of its own as `SQLITE_ERROR`, whatever its code.
fn failed(e: Error) -> rusqlite::Error {
    if let Error::Storage { source, .. } = &e
        && let Some(rusqlite::Error::SqliteFailure(code, _)) =
            source.downcast_ref::<rusqlite::Error>()
        && matches!(
            code.code,
            rusqlite::ErrorCode::DatabaseBusy
                | rusqlite::ErrorCode::DatabaseLocked
                | rusqlite::ErrorCode::OperationInterrupted
        )
    {
        return rusqlite::Error::SqliteFailure(*code, None);
    }
    rusqlite::Error::SqliteFailure(
        ffi::Error::new(ffi::SQLITE_ERROR),
        Some(format!("semaphore: {}", e.chain())),
    )
}

/// Runs the store's `call` on the connection of `ctx`, its error as
/// [`failed`].
fn run<T>(
    state: &State,
    ctx: &Context<'_>,
    call: impl FnOnce(&Attached, &Connection) -> Result<T>,
) -> rusqlite::Result<T> {
    with_connection(state, ctx, |conn| call(&state.attached, conn))?.map_err(failed)
}

/// Registers every `semaphore_*` function on `conn`, each sharing `state`.
/// None is deterministic or innocuous: each reads the clock or writes, so
/// none may run in a view, a trigger or an index.
pub(crate) fn register(conn: &Connection, state: &Arc<State>) -> rusqlite::Result<()> {
    let flags = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DIRECTONLY;
    let on = |name: &'static std::ffi::CStr,
              arity: i32,
              f: fn(&State, &Context<'_>) -> rusqlite::Result<Value>| {
        let state = state.clone();
        conn.create_scalar_function(name, arity, flags, move |ctx| f(&state, ctx))
    };
    on(c"semaphore_register", 2, register_pool)?;
    on(c"semaphore_inspect", 1, inspect)?;
    on(c"semaphore_borrow", -1, borrow)?;
    on(c"semaphore_return", 2, return_lease)?;
    on(c"semaphore_renew", 3, renew)?;
    on(c"semaphore_holders", -1, holders)?;
    on(c"semaphore_force_return", 2, force_return)?;
    on(c"semaphore_next_expiry", 1, next_expiry)?;
    on(c"semaphore_forget_statements", 0, |state, _| {
        state.forget_statements();
        Ok(Value::Null)
    })?;
    Ok(())
}

fn arity(
    ctx: &Context<'_>,
    function: &str,
    range: std::ops::RangeInclusive<usize>,
) -> rusqlite::Result<()> {
    if range.contains(&ctx.len()) {
        return Ok(());
    }
    Err(args::invalid(
        function,
        "arguments",
        &format!(
            "{} to {} arguments, not {}",
            range.start(),
            range.end(),
            ctx.len()
        ),
    ))
}

fn register_pool(state: &State, ctx: &Context<'_>) -> rusqlite::Result<Value> {
    const F: &str = "semaphore_register";
    let pool = args::pool(ctx, 0, F)?;
    let max = state.attached.limits().max_count;
    let count = args::required(ctx, 1, F, "count", 0..=i64::from(max))?;
    let count = u32::try_from(count).map_err(|_| args::invalid(F, "count", "0 or more"))?;
    let state = run(state, ctx, |a, c| a.register(c, pool, count))?;
    Ok(Value::Text(json::state(&state)))
}

fn inspect(state: &State, ctx: &Context<'_>) -> rusqlite::Result<Value> {
    let pool = args::pool(ctx, 0, "semaphore_inspect")?;
    let state = run(state, ctx, |a, c| a.inspect(c, pool))?;
    Ok(Value::Text(json::state(&state)))
}

fn borrow(state: &State, ctx: &Context<'_>) -> rusqlite::Result<Value> {
    const F: &str = "semaphore_borrow";
    arity(ctx, F, 2..=6)?;
    let pool = args::pool(ctx, 0, F)?;
    let ttl = args::ttl(ctx, 1, F)?;
    let mut options = BorrowOptions::new();
    let max = state.attached.limits().max_count;
    if let Some(slots) = args::integer(ctx, 2, F, "slots", 1..=i64::from(max))? {
        options = options.slots(u32::try_from(slots).unwrap_or(u32::MAX));
    }
    if let Some(owner) = args::text(ctx, 3, F, "owner")? {
        options = options.owner(owner);
    }
    if let Some(bound) = args::integer(ctx, 5, F, "bound", 0..=1)? {
        options = options.bound(bound == 1);
    }
    if let Some(key) = args::text(ctx, 4, F, "key")? {
        // A key names one request (rule "Idempotency keys are atomic"):
        // the same key with other slots or binding is refused.
        options.request_digest = Some(
            uuid::Uuid::new_v5(
                &uuid::Uuid::NAMESPACE_OID,
                format!(
                    "semaphore-sqlite-ext/borrow/{}/{}",
                    options.slots, options.bound
                )
                .as_bytes(),
            )
            .as_u128(),
        );
        options = options.key(key);
    }
    match run(state, ctx, |a, c| a.borrow(c, pool, ttl, &options))? {
        TryBorrow::Granted { lease } => Ok(Value::Text(json::lease(&lease))),
        TryBorrow::Exhausted { .. } => Ok(Value::Null),
    }
}

fn return_lease(state: &State, ctx: &Context<'_>) -> rusqlite::Result<Value> {
    const F: &str = "semaphore_return";
    let (pool, lease) = (args::pool(ctx, 0, F)?, args::lease(ctx, 1, F)?);
    let returned = run(state, ctx, |a, c| a.return_lease(c, pool, lease))?;
    Ok(Value::Integer(i64::from(returned)))
}

fn renew(state: &State, ctx: &Context<'_>) -> rusqlite::Result<Value> {
    const F: &str = "semaphore_renew";
    let (pool, lease) = (args::pool(ctx, 0, F)?, args::lease(ctx, 1, F)?);
    let ttl = args::ttl(ctx, 2, F)?;
    let renewed = run(state, ctx, |a, c| a.renew(c, pool, lease, ttl))?;
    Ok(renewed.map_or(Value::Null, |l| Value::Text(json::lease(&l))))
}

fn holders(state: &State, ctx: &Context<'_>) -> rusqlite::Result<Value> {
    const F: &str = "semaphore_holders";
    arity(ctx, F, 1..=2)?;
    let pool = args::pool(ctx, 0, F)?;
    let with_leases = args::integer(ctx, 1, F, "with_leases", 0..=1)? == Some(1);
    let holders = run(state, ctx, |a, c| a.holders(c, pool))?;
    let listed: Vec<_> = holders
        .iter()
        .map(|h| json::holder(h, with_leases))
        .collect();
    Ok(Value::Text(serde_json::Value::from(listed).to_string()))
}

fn force_return(state: &State, ctx: &Context<'_>) -> rusqlite::Result<Value> {
    const F: &str = "semaphore_force_return";
    let pool = args::pool(ctx, 0, F)?;
    let position = args::required(ctx, 1, F, "position", 0..=i64::from(u32::MAX))?;
    let position =
        u32::try_from(position).map_err(|_| args::invalid(F, "position", "0 or more"))?;
    let ended = run(state, ctx, |a, c| a.force_return(c, pool, position))?;
    Ok(ended.map_or(Value::Null, |h| {
        Value::Text(json::holder(&h, false).to_string())
    }))
}

fn next_expiry(state: &State, ctx: &Context<'_>) -> rusqlite::Result<Value> {
    let pool = args::pool(ctx, 0, "semaphore_next_expiry")?;
    let holders = run(state, ctx, |a, c| a.holders(c, pool))?;
    Ok(holders
        .iter()
        .map(|h| json::unix_ms(h.lease.expires_at))
        .min()
        .map_or(Value::Null, Value::Integer))
}
