//! The functions' answers as JSON text: what the Rust API's types hold,
//! times in unix milliseconds, ids as UUID text.

use std::time::{SystemTime, UNIX_EPOCH};

use semaphore_sqlite::{Holder, Lease, PoolState};
use serde_json::{Value, json};

/// Unix milliseconds of `t` (the store keeps whole ones).
pub(crate) fn unix_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// `{"pool", "lease", "position", "positions", "token", "expires_at"}`.
pub(crate) fn lease(lease: &Lease) -> String {
    json!({
        "pool": lease.pool.as_uuid().to_string(),
        "lease": lease.id.as_uuid().to_string(),
        "position": lease.position,
        "positions": lease.positions.to_vec(),
        "token": lease.token,
        "expires_at": unix_ms(lease.expires_at),
    })
    .to_string()
}

/// `{"pool", "count", "in_use", "available", "draining"}`.
pub(crate) fn state(state: &PoolState) -> String {
    json!({
        "pool": state.id.as_uuid().to_string(),
        "count": state.count,
        "in_use": state.in_use,
        "available": state.available,
        "draining": state.draining,
    })
    .to_string()
}

/// A holder: `{"position", "positions", "token", "expires_at", "owner",
/// "key"}`, and `"lease"` only if `with_lease` (a lease id lets its
/// bearer return or renew the lease, so listings leave it out unless
/// asked, as the HTTP service's do).
pub(crate) fn holder(holder: &Holder, with_lease: bool) -> Value {
    let lease = &holder.lease;
    let mut out = json!({
        "position": lease.position,
        "positions": lease.positions.to_vec(),
        "token": lease.token,
        "expires_at": unix_ms(lease.expires_at),
        "owner": holder.owner,
        "key": holder.key,
    });
    if with_lease {
        out["lease"] = json!(lease.id.as_uuid().to_string());
    }
    out
}
