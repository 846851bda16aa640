//! The decoding of the scripts' replies into the core's types.

use redis::Value;
use semaphore_core::store::from_unix_ms;
use semaphore_core::{Error, Holder, Lease, LeaseId, PoolId, Positions, Result, SessionId};

use crate::error::malformed;

/// A borrow's or renew's answer for one pool.
pub(crate) enum Attempt {
    Granted(Lease),
    /// The session the request named has ended.
    SessionEnded,
    /// Refused; when to look again (the earliest expiry), unix ms, and the
    /// client ids of the links of the places queued ahead.
    Exhausted(Option<u64>, Vec<i64>),
    /// No such pool.
    Missing,
    /// In a refused multi-pool borrow: this pool had room.
    HadRoom,
    /// The pool drains.
    Draining,
    /// The key names a lease granted for another request digest.
    KeyReused,
}

/// The items of an array reply.
pub(crate) fn items(operation: &'static str, value: Value) -> Result<Vec<Value>> {
    match value {
        Value::Array(items) => Ok(items),
        other => Err(malformed(operation, &format!("{other:?}"))),
    }
}

pub(crate) fn int(operation: &'static str, value: &Value) -> Result<i64> {
    match value {
        Value::Int(n) => Ok(*n),
        other => Err(malformed(operation, &format!("{other:?} for a number"))),
    }
}

fn u32_of(operation: &'static str, value: &Value) -> Result<u32> {
    u32::try_from(int(operation, value)?)
        .map_err(|_| malformed(operation, "a position out of range"))
}

fn u64_of(operation: &'static str, value: &Value) -> Result<u64> {
    u64::try_from(int(operation, value)?).map_err(|_| malformed(operation, "a negative number"))
}

pub(crate) fn text(operation: &'static str, value: &Value) -> Result<Option<String>> {
    match value {
        Value::Nil => Ok(None),
        Value::BulkString(bytes) => String::from_utf8(bytes.clone())
            .map(Some)
            .map_err(|_| malformed(operation, "text that is not UTF-8")),
        other => Err(malformed(operation, &format!("{other:?} for text"))),
    }
}

fn lease_id(operation: &'static str, value: &Value) -> Result<LeaseId> {
    let id = text(operation, value)?.ok_or_else(|| malformed(operation, "no lease id"))?;
    id.parse::<uuid::Uuid>()
        .map(LeaseId::from_uuid)
        .map_err(|_| malformed(operation, "a lease id that is not a UUID"))
}

/// `[id, position, token, expiry]` as a lease of `pool`, holding the
/// positions of the array at `fields[positions]`, or `position`
/// alone if there is none there.
fn lease(
    operation: &'static str,
    pool: PoolId,
    fields: &[Value],
    positions: usize,
) -> Result<Lease> {
    let [id, position, token, expiry, ..] = fields else {
        return Err(malformed(operation, "a short lease"));
    };
    let lowest = u32_of(operation, position)?;
    let session_at = positions + 1;
    let positions = match fields.get(positions) {
        Some(Value::Array(all)) => {
            let all = all
                .iter()
                .map(|p| u32_of(operation, p))
                .collect::<Result<Vec<_>>>()?;
            Positions::new(all)
                .filter(|ps| ps.lowest() == lowest)
                .ok_or_else(|| malformed(operation, "positions that do not fit the lease"))?
        }
        _ => Positions::one(lowest),
    };
    let session = match fields.get(session_at) {
        None | Some(Value::Nil) => None,
        Some(value) => Some(
            text(operation, value)?
                .and_then(|s| s.parse::<uuid::Uuid>().ok())
                .map(SessionId::from_uuid)
                .ok_or_else(|| malformed(operation, "a session that is not a UUID"))?,
        ),
    };
    Ok(Lease::holding(
        lease_id(operation, id)?,
        pool,
        positions,
        u64_of(operation, token)?,
        from_unix_ms(u64_of(operation, expiry)?),
    )
    .with_session(session))
}

/// `[status, ...]`: 0 granted (`id, position, token, expiry, positions`),
/// 1 refused (`_, _, _, next look`), 2 no pool, 3 had room.
pub(crate) fn attempt(operation: &'static str, pool: PoolId, value: Value) -> Result<Attempt> {
    let fields = items(operation, value)?;
    let Some(status) = fields.first() else {
        return Err(malformed(operation, "an empty reply"));
    };
    match int(operation, status)? {
        0 => Ok(Attempt::Granted(lease(operation, pool, &fields[1..], 4)?)),
        1 => Ok(Attempt::Exhausted(
            match fields.get(4) {
                None | Some(Value::Nil) => None,
                Some(at) => Some(u64_of(operation, at)?),
            },
            link_ids(operation, fields.get(5))?,
        )),
        2 => Ok(Attempt::Missing),
        3 => Ok(Attempt::HadRoom),
        4 => Ok(Attempt::Draining),
        5 => Ok(Attempt::SessionEnded),
        6 => Ok(Attempt::KeyReused),
        n => Err(malformed(operation, &format!("status {n}"))),
    }
}

/// `[id, position, token, expiry, owner, key, positions]` as a holder of
/// `pool`.
pub(crate) fn holder(operation: &'static str, pool: PoolId, value: Value) -> Result<Holder> {
    let fields = items(operation, value)?;
    let lease = lease(operation, pool, &fields, 6)?.with_session(None);
    let label = |i: usize| fields.get(i).map_or(Ok(None), |v| text(operation, v));
    Ok(Holder::new(lease, label(4)?, label(5)?))
}

/// A list of client ids, as the scripts write them: an array of
/// numbers in text. Missing is none.
pub(crate) fn link_ids(operation: &'static str, value: Option<&Value>) -> Result<Vec<i64>> {
    match value {
        None | Some(Value::Nil) => Ok(Vec::new()),
        Some(Value::Array(ids)) => ids
            .iter()
            .map(|id| {
                let id = text(operation, id)?.unwrap_or_default();
                client_id(operation, &id)
            })
            .collect(),
        Some(other) => Err(malformed(operation, &format!("{other:?} for client ids"))),
    }
}

fn client_id(operation: &'static str, id: &str) -> Result<i64> {
    id.parse()
        .map_err(|_| malformed(operation, "a client id that is not a number"))
}

/// The store's answer that a pool is missing.
pub(crate) fn not_found(pool: PoolId) -> Error {
    Error::PoolNotFound { pool }
}
