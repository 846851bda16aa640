//! A page of the file's pools, in id order (rule "Listing pools").

use rusqlite::Connection;
use semaphore_core::{PoolId, PoolState};

use crate::holder::Holders;

/// At most `limit` pools from id `start` on (inclusive), each as
/// [`inspect`](super::inspect) states it, in the step's one transaction:
/// one range read of the pools' primary key (blobs compare as bytes, the
/// order of [`PoolId`]), then each pool's own rows.
pub(crate) fn pools(
    conn: &Connection,
    start: PoolId,
    limit: u32,
    now: i64,
    holders: &Holders,
) -> rusqlite::Result<Vec<PoolState>> {
    let ids: Vec<[u8; 16]> = conn
        .prepare_cached("SELECT pool FROM semaphore_pools WHERE pool >= ?1 ORDER BY pool LIMIT ?2")?
        .query_map(rusqlite::params![start.as_uuid().as_bytes(), limit], |r| {
            r.get(0)
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut page = Vec::with_capacity(ids.len());
    for id in ids {
        let pool = PoolId::from_uuid(uuid::Uuid::from_bytes(id));
        page.extend(super::inspect(conn, pool, now, holders)?);
    }
    Ok(page)
}
