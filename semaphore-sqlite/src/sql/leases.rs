//! Leases read back: rows to leases (a lease of several slots gathers its
//! rows), and the active ones (not expired, not held by a holder that is
//! gone).

use rusqlite::{Connection, OptionalExtension, params};
use semaphore_core::store::{self, KEY_DIGEST_SEPARATOR, key_name};
use semaphore_core::{Holder, Lease, LeaseId, PoolId};

use super::count_of;
use crate::holder::{HolderId, Holders};
use crate::time::instant;

/// Slots held at `now` by leases that are active: not expired, and
/// not bound to a holder that is gone.
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

/// Deletes the leases of `pool` whose holder is gone; how many slots
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

/// The rows of `pool` whose key has the name of stored key ?2 (the key
/// itself, or the name followed by a request digest: a range of the key
/// index, ?3 to ?4), active at ?5.
const BY_KEY_NAME: &str = "pool = ?1 AND (borrow_key = ?2 OR (borrow_key > ?3 AND borrow_key < ?4))
     AND expires_at > ?5";

/// The bounds of [`BY_KEY_NAME`] for stored key `borrow_key`.
fn name_range(borrow_key: &str) -> (&str, String, String) {
    let name = key_name(borrow_key);
    (
        name,
        format!("{name}{KEY_DIGEST_SEPARATOR}"),
        format!("{name}\u{20}"),
    )
}

/// The holder the active lease borrowed under the name of `borrow_key` is
/// bound to, if that lease exists and is bound.
pub(super) fn keyed_holder(
    conn: &Connection,
    key: &[u8],
    borrow_key: Option<&str>,
    now: i64,
) -> rusqlite::Result<Option<HolderId>> {
    let Some(borrow_key) = borrow_key else {
        return Ok(None);
    };
    let (name, low, high) = name_range(borrow_key);
    Ok(conn
        .prepare_cached(&format!(
            "SELECT holder FROM semaphore_leases WHERE {BY_KEY_NAME}"
        ))?
        .query_row(params![key, name, low, high, now], |r| r.get(0))
        .optional()?
        .flatten())
}

/// What a request's stored key finds among a pool's active leases.
pub(crate) enum Keyed {
    /// No active lease has a key of its name.
    No,
    /// The lease borrowed under this very key, as it stands.
    Same(Lease),
    /// A lease borrowed under the name with another request digest
    /// (`Error::KeyReused`).
    Reused,
}

/// The active lease of `pool` borrowed under the name of `borrow_key`, if
/// any, and whether its stored key is `borrow_key`.
pub(crate) fn keyed(
    conn: &Connection,
    pool: PoolId,
    borrow_key: Option<&str>,
    now: i64,
) -> rusqlite::Result<Keyed> {
    let Some(borrow_key) = borrow_key else {
        return Ok(Keyed::No);
    };
    let key = pool.as_uuid().as_bytes();
    let (name, low, high) = name_range(borrow_key);
    let Some((id, stored)) = conn
        .prepare_cached(&format!(
            "SELECT lease, borrow_key FROM semaphore_leases WHERE {BY_KEY_NAME}"
        ))?
        .query_row(params![key, name, low, high, now], |r| {
            Ok((r.get::<_, [u8; 16]>(0)?, r.get::<_, String>(1)?))
        })
        .optional()?
    else {
        return Ok(Keyed::No);
    };
    if stored != borrow_key {
        return Ok(Keyed::Reused);
    }
    let rows = conn
        .prepare_cached(
            "SELECT lease, position, token, expires_at, owner, borrow_key FROM semaphore_leases
             WHERE pool = ?1 AND lease = ?2 AND expires_at > ?3",
        )?
        .query_map(params![key, id, now], row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(holders_of(rows, pool)
        .pop()
        .map_or(Keyed::No, |h| Keyed::Same(h.lease)))
}

/// The active lease of `pool` with id `lease`, if any: what a retried
/// attempt (its answer lost) was granted.
pub(crate) fn by_id(
    conn: &Connection,
    pool: PoolId,
    lease: LeaseId,
    now: i64,
) -> rusqlite::Result<Option<Lease>> {
    let key = pool.as_uuid().as_bytes();
    let rows = conn
        .prepare_cached(
            "SELECT lease, position, token, expires_at, owner, borrow_key FROM semaphore_leases
             WHERE pool = ?1 AND lease = ?2 AND expires_at > ?3",
        )?
        .query_map(params![key, lease.as_uuid().as_bytes(), now], row)?
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

/// The leases the rows make up (see
/// [`holders_from_rows`](semaphore_core::store::holders_from_rows)).
pub(super) fn holders_of(rows: Vec<Row>, pool: PoolId) -> Vec<Holder> {
    let rows =
        rows.into_iter().map(
            |(id, position, token, expires_at, owner, key)| store::LeaseRow {
                lease: LeaseId::from_uuid(uuid::Uuid::from_bytes(id)),
                position,
                token: token.unsigned_abs(),
                expires_at: instant(expires_at),
                owner,
                key,
                session: None,
            },
        );
    store::holders_from_rows(pool, rows)
}

/// The active leases of `pool` by position, those of holders that are
/// gone left out; `None` if the pool does not exist.
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

/// Unbinds lease `lease` of `pool` from its holder if it is active:
/// it then lives to its expiry whatever becomes of the process;
/// whether it was active.
pub(crate) fn unbind(
    conn: &Connection,
    pool: PoolId,
    lease: LeaseId,
    now: i64,
) -> rusqlite::Result<bool> {
    let changed = conn
        .prepare_cached(
            "UPDATE semaphore_leases SET holder = NULL
             WHERE lease = ?1 AND pool = ?2 AND expires_at > ?3",
        )?
        .execute(params![
            lease.as_uuid().as_bytes(),
            pool.as_uuid().as_bytes(),
            now
        ])?;
    Ok(changed > 0)
}

/// Ends the active lease holding `position` (all its slots); `None` if
/// the pool does not exist, `Some(None)` if no active lease holds the
/// position.
pub(crate) fn force_return(
    conn: &Connection,
    pool: PoolId,
    position: u32,
    now: i64,
) -> rusqlite::Result<Option<Option<Holder>>> {
    if count_of(conn, &pool)?.is_none() {
        return Ok(None);
    }
    let rows = conn
        .prepare_cached(
            "DELETE FROM semaphore_leases WHERE pool = ?1 AND expires_at > ?3 AND lease =
                 (SELECT lease FROM semaphore_leases WHERE pool = ?1 AND position = ?2)
             RETURNING lease, position, token, expires_at, owner, borrow_key",
        )?
        .query_map(params![pool.as_uuid().as_bytes(), position, now], row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(Some(holders_of(rows, pool).pop()))
}
