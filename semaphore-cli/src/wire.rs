//! What travels on the wire: the seed's JSON bodies, in seconds, and their
//! parsing into checked values.

use std::time::{Duration, SystemTime};

use semaphore_core::store::unix_ms;
use semaphore_core::{Lease, PoolState};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::ApiError;

/// `PUT /l/{id}`: the number of slots; `draining` is an extension.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Register {
    /// The number of slots, `0..=max-count` (default 1000).
    #[schema(value_type = u32, minimum = 0, maximum = 1000)]
    pub(crate) count: serde_json::Number,
    /// Start (`true`) or end (`false`) the pool's drain; left as it is when
    /// absent. A draining pool grants nothing new (borrows answer 503
    /// `pool_draining`), while returns and renewals go on; every server of
    /// a shared store sees it.
    #[serde(default)]
    pub(crate) draining: Option<bool>,
}

/// `POST /l/{id}/borrow`: `wait` defaults to 0; `slots` and `owner` are
/// extensions.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Borrow {
    /// Seconds the lease is held before it frees itself; at least 0.001
    /// (a millisecond, the resolution of every expiry), clamped to the
    /// server's max ttl.
    #[schema(value_type = f64, minimum = 0.001)]
    pub(crate) ttl: serde_json::Number,
    /// Seconds the call may wait for a slot; default 0, clamped to the
    /// server's max wait.
    #[serde(default)]
    #[schema(value_type = Option<f64>, minimum = 0.0)]
    pub(crate) wait: Option<serde_json::Number>,
    /// How many slots the lease holds: default 1, at most the
    /// server's max count. The lease holds the lowest free positions, all
    /// returned, renewed and expired together; a borrow of more slots than
    /// the pool's count waits for the count to be raised.
    #[serde(default)]
    #[schema(value_type = Option<u32>, minimum = 1, maximum = 1000)]
    pub(crate) slots: Option<serde_json::Number>,
    /// Wait (within `wait`) while the pool drains, instead of a 503 at once.
    #[serde(default)]
    pub(crate) wait_while_draining: Option<bool>,
    /// A label saying who holds the lease (1-64 bytes, printable).
    #[serde(default)]
    #[schema(min_length = 1, max_length = 64)]
    pub(crate) owner: Option<String>,
}

/// `POST /l/{id}/enqueue` (an extension; dflockd's two-phase borrow): a
/// borrow's fields but `wait`. The ttl runs from the grant.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Enqueue {
    /// Seconds the lease is held once granted; at least 0.001, clamped to
    /// the server's max ttl.
    #[schema(value_type = f64, minimum = 0.001)]
    pub(crate) ttl: serde_json::Number,
    /// How many slots the lease holds: default 1.
    #[serde(default)]
    #[schema(value_type = Option<u32>, minimum = 1, maximum = 1000)]
    pub(crate) slots: Option<serde_json::Number>,
    /// Keep the place while the pool drains, instead of a 503.
    #[serde(default)]
    pub(crate) wait_while_draining: Option<bool>,
    /// A label saying who holds the lease (1-64 bytes, printable).
    #[serde(default)]
    #[schema(min_length = 1, max_length = 64)]
    pub(crate) owner: Option<String>,
}

/// `POST /l/{id}/wait`: poll a ticket for up to `wait` seconds.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Wait {
    /// The ticket `enqueue` answered, as it was answered.
    #[schema(min_length = 1, max_length = 512)]
    pub(crate) ticket: String,
    /// Seconds to wait for the grant; default 0, clamped to the server's
    /// max wait.
    #[serde(default)]
    #[schema(value_type = Option<f64>, minimum = 0.0)]
    pub(crate) wait: Option<serde_json::Number>,
}

/// `POST /l/{id}/cancel`: give a ticket up.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Cancel {
    /// The ticket to give up.
    #[schema(min_length = 1, max_length = 512)]
    pub(crate) ticket: String,
}

/// A two-phase borrow still queued: poll it again within `poll_within`
/// seconds (counted from the end of the last poll) or it is dropped.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Queued {
    /// The ticket to poll with `POST /l/{id}/wait`: opaque text, at most
    /// 512 bytes. On a shared store (SQLite, PostgreSQL, MySQL, Redis) the
    /// store keeps its place, and any server sharing the store answers it;
    /// on a memory store, only this server.
    #[schema(min_length = 1, max_length = 512)]
    pub(crate) ticket: String,
    /// The ticket's place in the pool's queue: 1 is next. It counts the
    /// places ahead of it in the store's queue: every server's tickets,
    /// and the waiting borrowers ahead of it (on a shared store, each
    /// server's first waiting borrower; on a memory store, this server's
    /// waiting borrowers).
    pub(crate) place: usize,
    /// Seconds the place is kept after a poll ends: poll again within it.
    pub(crate) poll_within: f64,
}

/// Whether a cancelled ticket was still kept.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Cancelled {
    /// `true` if the ticket was still queued (it leaves the queue);
    /// `false` if it was unknown. A lease a poll answered stays the
    /// client's: return it with `/return`.
    pub(crate) cancelled: bool,
}

/// `POST /l/{id}/return`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Return {
    /// The lease to return.
    #[schema(value_type = uuid::Uuid)]
    pub(crate) lease: String,
}

/// `POST /l/{id}/renew` (an extension): a new ttl from now.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Renew {
    /// The lease to renew.
    #[schema(value_type = uuid::Uuid)]
    pub(crate) lease: String,
    /// Seconds from now; at least 0.001, clamped to the server's max ttl.
    #[schema(value_type = f64, minimum = 0.001)]
    pub(crate) ttl: serde_json::Number,
}

/// `{id, count, in_use, available}`: a pool's state at one instant; then
/// who waits for it at this server.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct State {
    #[schema(value_type = uuid::Uuid)]
    id: String,
    count: u32,
    in_use: u32,
    available: u32,
    /// Whether the pool drains: it grants nothing new.
    draining: bool,
    /// Borrowers known to wait for the pool: this server's waiting
    /// borrows, every ticket, and one for each other server or process
    /// whose borrowers queue on a shared store (more of its borrowers may
    /// wait behind that one).
    waiting: usize,
    /// How long the longest-waiting of them has waited so far, in seconds
    /// (0 when none waits).
    longest_wait: f64,
}

impl State {
    /// `s`, with the borrowers known to wait for it
    /// ([`Pool::waiting_everywhere`](semaphore_core::Pool::waiting_everywhere)).
    pub(crate) fn of(s: PoolState, waiting: semaphore_core::Waiting) -> Self {
        Self {
            id: s.id.to_string(),
            count: s.count,
            in_use: s.in_use,
            available: s.available,
            draining: s.draining,
            waiting: waiting.count,
            longest_wait: waiting.longest.map_or(0.0, |d| d.as_secs_f64()),
        }
    }
}

/// A page of `GET /l`: the pools in id order, and the id to list after
/// for the next page (`null` after the last).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Page {
    pub(crate) pools: Vec<State>,
    /// Pass it as `after` for the next page; `null` when this page was
    /// not full (the last; a full page's `next` may lead to an empty one).
    #[schema(value_type = Option<uuid::Uuid>)]
    pub(crate) next: Option<String>,
}

/// A granted or renewed lease: the seed's four fields, then `token`,
/// `expires_at_ms` and `positions`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Granted {
    /// The lease's id: keep it secret, it returns the lease.
    #[schema(value_type = uuid::Uuid)]
    lease: String,
    /// The lowest of `positions`: the slot, for a lease of one.
    position: u32,
    expires_at_unix: u64,
    expires_in: u64,
    token: u64,
    expires_at_ms: u64,
    /// Every position the lease holds, lowest first (one unless `slots`
    /// asked for more).
    positions: Vec<u32>,
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
            positions: lease.positions.to_vec(),
        }
    }
}

/// A holder in `GET /l/{id}/leases`: never its lease id.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Holder {
    /// The lowest of `positions`.
    position: u32,
    /// Every position the lease holds, lowest first.
    positions: Vec<u32>,
    token: u64,
    owner: Option<String>,
    expires_at_unix: u64,
    expires_in: u64,
    /// Milliseconds left, for a countdown.
    expires_in_ms: u64,
}

impl Holder {
    pub(crate) fn new(holder: &semaphore_core::Holder, now: SystemTime) -> Self {
        Self {
            position: holder.lease.position,
            positions: holder.lease.positions.to_vec(),
            token: holder.lease.token,
            owner: holder.owner.clone(),
            expires_at_unix: unix_ms(holder.lease.expires_at) / 1000,
            expires_in: seconds_left(&holder.lease, now),
            expires_in_ms: holder.lease.time_left(now).as_millis() as u64,
        }
    }
}

/// Whose place it is, as the API and `status --json` name it: `here`,
/// `ticket` or `process`.
pub(crate) fn place_kind(kind: semaphore_core::PlaceKind) -> &'static str {
    use semaphore_core::PlaceKind;
    match kind {
        PlaceKind::Here => "here",
        PlaceKind::Held => "ticket",
        _ => "process",
    }
}

/// One place in line in `GET /l/{id}/leases`: never its waiter id (a
/// ticket's credential).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Waiter {
    /// 1 for the first served.
    place: usize,
    /// Whose place: `here` (a borrow waiting at this server), `ticket` (a
    /// two-phase borrow's place) or `process` (another server's or
    /// process's borrowers, queued on a shared store: more may wait
    /// behind it).
    kind: &'static str,
    /// The slots it waits for.
    slots: u32,
    /// Seconds it has waited.
    waited: f64,
}

impl Waiter {
    pub(crate) fn new(place: usize, p: &semaphore_core::QueuedPlace, now: SystemTime) -> Self {
        Self {
            place,
            kind: place_kind(p.kind),
            slots: p.slots,
            waited: now
                .duration_since(p.since)
                .unwrap_or_default()
                .as_secs_f64(),
        }
    }
}

/// Whole seconds left, rounded to the nearest (a ttl of 30 s reads 30).
fn seconds_left(lease: &Lease, now: SystemTime) -> u64 {
    (lease.time_left(now).as_millis() as u64 + 500) / 1000
}

/// A JSON object body of type `T`, or a 400 that says what is wrong with
/// it. Bodies are objects, as the OpenAPI document says: serde would also
/// read a struct from an array (`[30, 0]`), which is refused.
pub(crate) fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let malformed =
        |e: serde_json::Error| ApiError::bad_request(format!("malformed JSON body: {e}"), None);
    let value: serde_json::Value = serde_json::from_slice(body).map_err(malformed)?;
    if !value.is_object() {
        return Err(ApiError::bad_request(
            "the body must be a JSON object, e.g. {\"ttl\": 30}",
            None,
        ));
    }
    serde_json::from_value(value).map_err(malformed)
}

/// The longest piece of a request echoed back in an error.
const ECHOED: usize = 64;

/// A UUID from the path or a body, or a 400 naming `field` (echoing at
/// most 64 characters of what was sent).
pub(crate) fn uuid(field: &'static str, text: &str) -> Result<uuid::Uuid, ApiError> {
    uuid::Uuid::parse_str(text).map_err(|_| {
        let shown: String = text.chars().take(ECHOED).collect();
        let more = if shown.len() < text.len() { "..." } else { "" };
        ApiError::bad_request(
            format!("{field} is not a UUID: {shown:?}{more}"),
            Some(field),
        )
    })
}

/// A count: a whole number in `0..=max` (`4` or `4.0`: JSON Schema's
/// integers include integral floats).
pub(crate) fn count(n: &serde_json::Number, max: u32) -> Result<u32, ApiError> {
    let whole = n.as_u64().or_else(|| {
        n.as_f64()
            .filter(|f| f.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(f))
            .map(|f| f as u64)
    });
    whole
        .and_then(|c| u32::try_from(c).ok())
        .filter(|c| *c <= max)
        .ok_or_else(|| {
            ApiError::bad_request(
                format!("count must be a whole number from 0 to {max}, got {n}"),
                Some("count"),
            )
        })
}

/// A borrow's number of slots: a whole number in `1..=max` (`2` or
/// `2.0`), or a 400 naming `slots`.
pub(crate) fn slots(n: &serde_json::Number, max: u32) -> Result<u32, ApiError> {
    count(n, max).ok().filter(|s| *s >= 1).ok_or_else(|| {
        ApiError::bad_request(
            format!("slots must be a whole number from 1 to {max}, got {n}"),
            Some("slots"),
        )
    })
}

/// Seconds as a duration: a finite number `>= 0`, or, for a ttl
/// (`positive`), at least 0.001: a lease's resolution is a millisecond,
/// and a shorter ttl would be granted expired (R5, "the smallest ttl").
/// Values above the maximum are clamped by the pool, as the seed says.
pub(crate) fn seconds(
    field: &'static str,
    n: &serde_json::Number,
    positive: bool,
) -> Result<Duration, ApiError> {
    let least = if positive { 0.001 } else { 0.0 };
    let secs = n
        .as_f64()
        .filter(|s| s.is_finite() && *s >= least)
        .ok_or_else(|| {
            let range = if positive {
                "of at least 0.001 (1 ms)"
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

/// `GET /l/{id}/leases`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Holders {
    /// The active leases, by position.
    pub(crate) leases: Vec<Holder>,
    /// Borrowers known to wait for the pool (as in a pool's state).
    pub(crate) waiting: usize,
    /// They, in line: first served first.
    pub(crate) queue: Vec<Waiter>,
}

/// `{"deleted": bool}`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Deleted {
    /// Whether the pool existed.
    pub(crate) deleted: bool,
}

/// `{"returned": bool}`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Returned {
    /// Whether the lease was active.
    pub(crate) returned: bool,
}

/// `{"status": "ok"}` or `{"status": "ready"}`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Status {
    /// `ok` or `ready`.
    pub(crate) status: &'static str,
}
