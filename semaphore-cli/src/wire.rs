//! What travels on the wire: the seed's JSON bodies, in seconds, and their
//! parsing into checked values.

use std::time::{Duration, SystemTime};

use semaphore_memory::{Lease, PoolState, unix_ms};
use serde::{Deserialize, Serialize};

use crate::error::ApiError;

/// `PUT /l/{id}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Register {
    pub(crate) count: serde_json::Number,
}

/// `POST /l/{id}/borrow`: `wait` defaults to 0; `owner` is an extension.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Borrow {
    pub(crate) ttl: serde_json::Number,
    #[serde(default)]
    pub(crate) wait: Option<serde_json::Number>,
    #[serde(default)]
    pub(crate) owner: Option<String>,
}

/// `POST /l/{id}/return`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Return {
    pub(crate) lease: String,
}

/// `POST /l/{id}/renew` (an extension): a new ttl from now.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Renew {
    pub(crate) lease: String,
    pub(crate) ttl: serde_json::Number,
}

/// `{id, count, in_use, available}`.
#[derive(Debug, Serialize)]
pub(crate) struct State {
    id: String,
    count: u32,
    in_use: u32,
    available: u32,
}

impl From<PoolState> for State {
    fn from(s: PoolState) -> Self {
        Self {
            id: s.id.to_string(),
            count: s.count,
            in_use: s.in_use,
            available: s.available,
        }
    }
}

/// A granted or renewed lease: the seed's four fields, then `token` and
/// `expires_at_ms`.
#[derive(Debug, Serialize)]
pub(crate) struct Granted {
    lease: String,
    position: u32,
    expires_at_unix: u64,
    expires_in: u64,
    token: u64,
    expires_at_ms: u64,
}

impl Granted {
    pub(crate) fn new(lease: &Lease, now: SystemTime) -> Self {
        Self {
            lease: lease.id.to_string(),
            position: lease.position,
            expires_at_unix: unix_ms(lease.expires_at) / 1000,
            expires_in: seconds_left(lease, now),
            token: lease.token,
            expires_at_ms: unix_ms(lease.expires_at),
        }
    }
}

/// A holder in `GET /l/{id}/leases`: never its lease id.
#[derive(Debug, Serialize)]
pub(crate) struct Holder {
    position: u32,
    token: u64,
    owner: Option<String>,
    expires_at_unix: u64,
    expires_in: u64,
}

impl Holder {
    pub(crate) fn new(holder: &semaphore_memory::Holder, now: SystemTime) -> Self {
        Self {
            position: holder.lease.position,
            token: holder.lease.token,
            owner: holder.owner.clone(),
            expires_at_unix: unix_ms(holder.lease.expires_at) / 1000,
            expires_in: seconds_left(&holder.lease, now),
        }
    }
}

/// Whole seconds left, rounded to the nearest (a ttl of 30 s reads 30).
fn seconds_left(lease: &Lease, now: SystemTime) -> u64 {
    (lease.time_left(now).as_millis() as u64 + 500) / 1000
}

/// A JSON body of type `T`, or a 400 that says what is wrong with it.
pub(crate) fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("malformed JSON body: {e}"), None))
}

/// A UUID from the path or a body, or a 400 naming `field`.
pub(crate) fn uuid(field: &'static str, text: &str) -> Result<uuid::Uuid, ApiError> {
    uuid::Uuid::parse_str(text)
        .map_err(|_| ApiError::bad_request(format!("{field} is not a UUID: {text:?}"), Some(field)))
}

/// A count: a whole number in `0..=max`.
pub(crate) fn count(n: &serde_json::Number, max: u32) -> Result<u32, ApiError> {
    n.as_u64()
        .and_then(|c| u32::try_from(c).ok())
        .filter(|c| *c <= max)
        .ok_or_else(|| {
            ApiError::bad_request(
                format!("count must be a whole number from 0 to {max}, got {n}"),
                Some("count"),
            )
        })
}

/// Seconds as a duration: a finite number `>= 0` (`> 0` if `positive`).
/// Values above the maximum are clamped by the pool, as the seed says.
pub(crate) fn seconds(
    field: &'static str,
    n: &serde_json::Number,
    positive: bool,
) -> Result<Duration, ApiError> {
    let secs = n.as_f64().filter(|s| s.is_finite() && *s >= 0.0);
    let secs = secs.filter(|s| !positive || *s > 0.0).ok_or_else(|| {
        let range = if positive {
            "greater than 0"
        } else {
            "0 or more"
        };
        ApiError::bad_request(
            format!("{field} must be a number of seconds {range}, got {n}"),
            Some(field),
        )
    })?;
    Ok(Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX))
}
