//! Lease rows read back as leases: a lease of several slots gathers
//! its rows' positions and the labels of its lowest row.

use semaphore_core::store::{self, from_unix_ms};
use semaphore_core::{Holder, LeaseId, PoolId, SessionId};

/// One lease row: `lease, position, token, expires_at, owner, borrow_key,
/// holder` (the holder is the lease's session).
pub(crate) type LeaseRow = (
    Vec<u8>,
    u32,
    i64,
    i64,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
);

fn text(bytes: Option<Vec<u8>>) -> Option<String> {
    bytes.map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// The leases the rows make up (see
/// [`holders_from_rows`](semaphore_core::store::holders_from_rows)).
pub(crate) fn holders_of(rows: Vec<LeaseRow>, pool: PoolId) -> Vec<Holder> {
    let rows = rows
        .into_iter()
        .map(
            |(id, position, token, expires_at, owner, key, session)| store::LeaseRow {
                lease: LeaseId::from_uuid(uuid::Uuid::from_slice(&id).unwrap_or_default()),
                position,
                token: token.unsigned_abs(),
                expires_at: from_unix_ms(expires_at.max(0).unsigned_abs()),
                owner: text(owner),
                key: text(key),
                session: session
                    .and_then(|s| uuid::Uuid::from_slice(&s).ok())
                    .map(SessionId::from_uuid),
            },
        );
    store::holders_from_rows(pool, rows)
}
