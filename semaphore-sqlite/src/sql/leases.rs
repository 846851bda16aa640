//! Leases read back: rows to leases (a lease of several slots gathers its
//! rows, R15), and the active ones as R7 and R16 see them (not expired, not
//! held by a holder that is gone).

use rusqlite::{Connection, OptionalExtension, params};
use semaphore_core::{Holder, Lease, LeaseId, PoolId, Positions};

use super::count_of;
use crate::holder::{HolderId, Holders};
use crate::time::instant;

/// Slots held at `now` by leases that are active: not expired (R7), and
/// not bound to a holder that is gone (R16).
pub(super) fn in_use(
    conn: &Connection,
    pool: &PoolId,
    now: i64,
    holders: &Holders,
) -> rusqlite::Result<u32> {
    let mut by_holder = conn.prepare_cached(
        "SELECT holder, COUNT(*) FROM semaphore_leases WHERE pool = ?1 AND expires_at > ?2
         GROUP BY holder",
    )?;
    let mut rows = by_holder.query(params![pool.as_uuid().as_bytes(), now])?;
    let mut in_use = 0u32;
    while let Some(row) = rows.next()? {
        let holder: Option<HolderId> = row.get(0)?;
        if !holder.is_some_and(|h| holders.is_gone(&h)) {
            in_use += row.get::<_, u32>(1)?;
        }
    }
    Ok(in_use)
}

/// R16: deletes the leases of `pool` whose holder is gone; how many slots
/// that freed.
pub(super) fn reap_gone(
    conn: &Connection,
    key: &[u8],
    now: i64,
    holders: &Holders,
) -> rusqlite::Result<i64> {
    let bound: Vec<HolderId> = conn
        .prepare_cached(
            "SELECT DISTINCT holder FROM semaphore_leases
             WHERE pool = ?1 AND holder IS NOT NULL AND expires_at > ?2",
        )?
        .query_map(params![key, now], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let mut freed = 0;
    for holder in bound.iter().filter(|h| holders.is_gone(h)) {
        freed += conn
            .prepare_cached("DELETE FROM semaphore_leases WHERE pool = ?1 AND holder = ?2")?
            .execute(params![key, holder])? as i64;
    }
    Ok(freed)
}

/// The holder the active lease borrowed with `borrow_key` is bound to, if
/// that lease exists and is bound.
pub(super) fn keyed_holder(
    conn: &Connection,
    key: &[u8],
    borrow_key: Option<&str>,
    now: i64,
) -> rusqlite::Result<Option<HolderId>> {
    let Some(borrow_key) = borrow_key else {
        return Ok(None);
    };
    Ok(conn
        .prepare_cached(
            "SELECT holder FROM semaphore_leases
             WHERE pool = ?1 AND borrow_key = ?2 AND expires_at > ?3",
        )?
        .query_row(params![key, borrow_key, now], |r| r.get(0))
        .optional()?
        .flatten())
}

/// The active lease of `pool` borrowed with `borrow_key`, if any.
pub(crate) fn keyed(
    conn: &Connection,
    pool: PoolId,
    borrow_key: Option<&str>,
    now: i64,
) -> rusqlite::Result<Option<Lease>> {
    let Some(borrow_key) = borrow_key else {
        return Ok(None);
    };
    let key = pool.as_uuid().as_bytes();
    let Some(id) = conn
        .prepare_cached(
            "SELECT lease FROM semaphore_leases
             WHERE pool = ?1 AND borrow_key = ?2 AND expires_at > ?3",
        )?
        .query_row(params![key, borrow_key, now], |r| r.get::<_, [u8; 16]>(0))
        .optional()?
    else {
        return Ok(None);
    };
    let rows = conn
        .prepare_cached(
            "SELECT lease, position, token, expires_at, owner, borrow_key FROM semaphore_leases
             WHERE pool = ?1 AND lease = ?2 AND expires_at > ?3",
        )?
        .query_map(params![key, id, now], row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(holders_of(rows, pool).pop().map(|h| h.lease))
}

/// One lease row: `lease, position, token, expires_at, owner, borrow_key`.
pub(super) type Row = ([u8; 16], u32, i64, i64, Option<String>, Option<String>);

pub(super) fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
    ))
}

/// The leases the rows make up, one per lease id, in the order of each
/// lease's first row; a lease of several slots (R15) gathers its rows'
/// positions and the labels of its lowest row.
pub(super) fn holders_of(rows: Vec<Row>, pool: PoolId) -> Vec<Holder> {
    let mut leases: Vec<(Row, Vec<u32>)> = Vec::new();
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
            |((id, position, token, expires_at, owner, key), positions)| {
                let lease = Lease::holding(
                    LeaseId::from_uuid(uuid::Uuid::from_bytes(id)),
                    pool,
                    Positions::new(positions).unwrap_or_else(|| Positions::one(position)),
                    token.unsigned_abs(),
                    instant(expires_at),
                );
                Holder::new(lease, owner, key)
            },
        )
        .collect()
}

/// The active leases of `pool` by position, those of holders that are
/// gone left out (R16); `None` if the pool does not exist.
pub(crate) fn holders(
    conn: &Connection,
    pool: PoolId,
    now: i64,
    holders: &Holders,
) -> rusqlite::Result<Option<Vec<Holder>>> {
    if count_of(conn, &pool)?.is_none() {
        return Ok(None);
    }
    let mut rows = Vec::new();
    let mut select = conn.prepare_cached(
        "SELECT lease, position, token, expires_at, owner, borrow_key, holder
         FROM semaphore_leases WHERE pool = ?1 AND expires_at > ?2 ORDER BY position",
    )?;
    let mut found = select.query(params![pool.as_uuid().as_bytes(), now])?;
    let mut gone: Vec<(HolderId, bool)> = Vec::new();
    while let Some(r) = found.next()? {
        if let Some(holder) = r.get::<_, Option<HolderId>>(6)? {
            let is_gone = match gone.iter().find(|(h, _)| *h == holder) {
                Some((_, known)) => *known,
                None => {
                    let known = holders.is_gone(&holder);
                    gone.push((holder, known));
                    known
                }
            };
            if is_gone {
                continue;
            }
        }
        rows.push(row(r)?);
    }
    Ok(Some(holders_of(rows, pool)))
}
