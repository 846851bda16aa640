//! Lease rows read back as leases: a lease of several slots (R15) gathers
//! its rows' positions and the labels of its lowest row.

use semaphore_core::store::from_unix_ms;
use semaphore_core::{Holder, Lease, LeaseId, PoolId, Positions, SessionId};

/// One lease row: `lease, position, token, expires_at, owner, borrow_key,
/// holder` (the holder is the lease's session, R16 amended).
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

/// The leases the rows make up, one per lease id, in the order of each
/// lease's first row.
pub(crate) fn holders_of(rows: Vec<LeaseRow>, pool: PoolId) -> Vec<Holder> {
    let mut leases: Vec<(LeaseRow, Vec<u32>)> = Vec::new();
    for row in rows {
        match leases.iter_mut().find(|(first, _)| first.0 == row.0) {
            Some((first, positions)) => {
                positions.push(row.1);
                if first.4.is_none() && first.5.is_none() {
                    (first.4, first.5) = (row.4, row.5);
                }
            }
            None => {
                let position = row.1;
                leases.push((row, vec![position]));
            }
        }
    }
    leases
        .into_iter()
        .map(
            |((id, position, token, expires_at, owner, key, session), positions)| {
                let id = uuid::Uuid::from_slice(&id).unwrap_or_default();
                let session = session
                    .and_then(|s| uuid::Uuid::from_slice(&s).ok())
                    .map(SessionId::from_uuid);
                let lease = Lease::holding(
                    LeaseId::from_uuid(id),
                    pool,
                    Positions::new(positions).unwrap_or_else(|| Positions::one(position)),
                    token.unsigned_abs(),
                    from_unix_ms(expires_at.max(0).unsigned_abs()),
                )
                .with_session(session);
                Holder::new(lease, text(owner), text(key))
            },
        )
        .collect()
}
