//! The store's tables, their version, and the check that a file holds what
//! this version expects (rule "Stores").
//!
//! The version lives in `semaphore_store`, a table of the store's own, never
//! in `PRAGMA user_version` (that belongs to the application). A file whose
//! `semaphore_` tables have another shape is refused, unchanged.

use rusqlite::{Connection, OptionalExtension, TransactionBehavior};
use semaphore_core::{Error, Result};

use crate::error::storage;

/// The schema version this build writes and reads.
pub(crate) const VERSION: i64 = 5;

/// Version 2. Pools and leases are keyed by 16-byte UUIDs; times are integer
/// unix milliseconds. `semaphore_store` holds the version and the store-wide
/// token counter (it outlives deletes). `semaphore_waiters` is the
/// cross-process queue of heads. A lease's `owner` label and
/// idempotency key (`borrow_key`, unique per pool) came in version 2, as the
/// last columns, so that a migrated file has the same shape as a new one;
/// so did a queued head's process id and pid namespace (`pid`, `pid_ns`),
/// which let other processes drop the head of a process that died.
///
/// Version 3 writes fewer B-tree pages per commit: it dropped the lease id's
/// unique index and the `(pool, expires_at)` index. Every query names the
/// pool, and a pool's leases lie together under the primary key (at most
/// `count` rows), so a return finds its row, and a borrow its expired rows
/// and next expiry, by scanning them. A borrow now writes the lease row and
/// the token counter (and the key index for a keyed lease), a return the
/// lease row alone. Lease ids are random 122-bit UUIDs made by the library;
/// their uniqueness never rested on the index.
///
/// Version 4 holds weighted leases: a lease of `n` slots is `n` rows,
/// one per position, with the same lease id, token and expiry; its owner
/// label and key are on its lowest position's row only, so the key index
/// still names one row per lease. A queued head records how many slots it
/// waits for (`slots`), so that the heads ahead of a borrower are owed
/// their weights, not one slot each. A lease bound to its holder
/// names it (`holder`, see [`holder`](crate::holder)); `NULL` for a lease
/// left to its ttl. A pool that drains grants nothing new (`draining`).
///
/// Version 5 records when a queued place was taken (`since`, unix ms;
/// `NULL` for the places a version 4 process took), for the listings of
/// who waits ([`Store::queue`](semaphore_core::store::Store::queue)).
const TABLES: &str = "
CREATE TABLE IF NOT EXISTS semaphore_store (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    schema_version INTEGER NOT NULL,
    last_token INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS semaphore_pools (
    pool BLOB PRIMARY KEY,
    count INTEGER NOT NULL,
    draining INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS semaphore_leases (
    pool BLOB NOT NULL,
    position INTEGER NOT NULL,
    lease BLOB NOT NULL,
    token INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    owner TEXT,
    borrow_key TEXT,
    holder BLOB,
    PRIMARY KEY (pool, position)
) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS semaphore_leases_key ON semaphore_leases (pool, borrow_key)
    WHERE borrow_key IS NOT NULL;
CREATE TABLE IF NOT EXISTS semaphore_waiters (
    pool BLOB NOT NULL,
    waiter BLOB NOT NULL,
    ticket INTEGER NOT NULL,
    alive_until INTEGER NOT NULL,
    pid INTEGER,
    pid_ns TEXT,
    slots INTEGER NOT NULL DEFAULT 1,
    since INTEGER,
    PRIMARY KEY (pool, waiter)
) WITHOUT ROWID;
";

/// Migrations: entry `i` takes a file from version `i + 1` to `i + 2`, in
/// one transaction.
const MIGRATIONS: &[&str] = &[
    // 1 -> 2: owner labels and idempotency keys; queued heads' processes.
    "ALTER TABLE semaphore_leases ADD COLUMN owner TEXT;
     ALTER TABLE semaphore_leases ADD COLUMN borrow_key TEXT;
     ALTER TABLE semaphore_waiters ADD COLUMN pid INTEGER;
     ALTER TABLE semaphore_waiters ADD COLUMN pid_ns TEXT;
     CREATE UNIQUE INDEX IF NOT EXISTS semaphore_leases_key ON semaphore_leases (pool, borrow_key)
         WHERE borrow_key IS NOT NULL;",
    // 2 -> 3: no lease id index, no expiry index. A table's UNIQUE
    // constraint cannot be dropped in place: the table is rebuilt.
    "DROP INDEX IF EXISTS semaphore_leases_expiry;
     CREATE TABLE semaphore_leases_v3 (
         pool BLOB NOT NULL,
         position INTEGER NOT NULL,
         lease BLOB NOT NULL,
         token INTEGER NOT NULL,
         expires_at INTEGER NOT NULL,
         owner TEXT,
         borrow_key TEXT,
         PRIMARY KEY (pool, position)
     ) WITHOUT ROWID;
     INSERT INTO semaphore_leases_v3 (pool, position, lease, token, expires_at, owner, borrow_key)
         SELECT pool, position, lease, token, expires_at, owner, borrow_key FROM semaphore_leases;
     DROP TABLE semaphore_leases;
     ALTER TABLE semaphore_leases_v3 RENAME TO semaphore_leases;
     CREATE UNIQUE INDEX semaphore_leases_key ON semaphore_leases (pool, borrow_key)
         WHERE borrow_key IS NOT NULL;",
    // 3 -> 4: weighted leases (every lease of a version 3 file is one row)
    // and leases bound to their holder (none of a version 3 file is).
    "ALTER TABLE semaphore_waiters ADD COLUMN slots INTEGER NOT NULL DEFAULT 1;
     ALTER TABLE semaphore_leases ADD COLUMN holder BLOB;
     ALTER TABLE semaphore_pools ADD COLUMN draining INTEGER NOT NULL DEFAULT 0;",
    // 4 -> 5: when each queued place was taken (unknown for those taken
    // before).
    "ALTER TABLE semaphore_waiters ADD COLUMN since INTEGER;",
];

/// The column shape of every table of ours: (table, [(name, type, notnull, pk)]).
type Shape = Vec<(String, Vec<(String, String, bool, i64)>)>;

fn shape(conn: &Connection) -> rusqlite::Result<Shape> {
    let mut tables = conn.prepare(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'semaphore\\_%' ESCAPE '\\' ORDER BY name",
    )?;
    let names: Vec<String> = tables
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let mut columns =
        conn.prepare("SELECT name, type, \"notnull\", pk FROM pragma_table_info(?1) ORDER BY cid")?;
    names
        .into_iter()
        .map(|table| {
            let cols = columns
                .query_map([&table], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                })?
                .collect::<rusqlite::Result<_>>()?;
            Ok((table, cols))
        })
        .collect()
}

fn expected_shape() -> rusqlite::Result<Shape> {
    let conn = Connection::open_in_memory()?;
    conn.execute_batch(TABLES)?;
    shape(&conn)
}

fn describe(shape: &Shape) -> String {
    semaphore_core::store::describe_tables(shape.iter().map(|(table, columns)| {
        let columns = columns.iter().map(|c| (c.0.as_str(), c.1.as_str()));
        (table.as_str(), columns)
    }))
}

fn mismatch(expected: impl Into<String>, found: impl Into<String>) -> Error {
    Error::SchemaMismatch {
        expected: expected.into(),
        found: found.into(),
    }
}

/// What the file holds, read without writing anything.
pub(crate) enum Found {
    /// No `semaphore_` table: a fresh file (or the application's own).
    Empty,
    /// Our tables at `VERSION`, in the expected shape.
    Current,
    /// Our tables at an older version, which a migration brings up.
    Older,
}

/// Reads what the file holds and refuses anything but an empty file, the
/// current shape, or an older version we can migrate. Writes nothing.
pub(crate) fn inspect(conn: &Connection) -> Result<Found> {
    let found = shape(conn).map_err(storage("open"))?;
    if found.is_empty() {
        return Ok(Found::Empty);
    }
    let version: Option<i64> = if found.iter().any(|(t, _)| t == "semaphore_store") {
        conn.query_row(
            "SELECT schema_version FROM semaphore_store WHERE id = 1",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(|e| {
            if crate::error::is_io(&e) {
                return Error::Storage {
                    operation: "open",
                    retryable: false,
                    source: Box::new(crate::error::FileReplaced(e)),
                };
            }
            mismatch(
                format!("semaphore_store at version {VERSION}"),
                format!("unreadable semaphore_store: {e}"),
            )
        })?
    } else {
        None
    };
    let expected = expected_shape().map_err(storage("open"))?;
    match version {
        Some(VERSION) if found == expected => Ok(Found::Current),
        Some(VERSION) => Err(mismatch(describe(&expected), describe(&found))),
        Some(v) if (1..VERSION).contains(&v) => Ok(Found::Older),
        Some(v) => Err(mismatch(
            format!("schema version {VERSION} or older"),
            format!("schema version {v}: written by a newer version of this library"),
        )),
        None => Err(mismatch(
            format!("semaphore_store with schema version {VERSION}"),
            format!("semaphore_ tables without a version: {}", describe(&found)),
        )),
    }
}

/// Creates the tables in a fresh file, or migrates an older one, in one
/// `BEGIN IMMEDIATE` transaction. Safe to race with other processes doing
/// the same.
pub(crate) fn prepare(conn: &Connection, found: Found) -> Result<()> {
    let tx = rusqlite::Transaction::new_unchecked(conn, TransactionBehavior::Immediate)
        .map_err(storage("open"))?;
    match found {
        Found::Current => return Ok(()),
        Found::Empty => {
            tx.execute_batch(TABLES).map_err(storage("open"))?;
            tx.execute(
                "INSERT OR IGNORE INTO semaphore_store (id, schema_version, last_token) VALUES (1, ?1, 0)",
                [VERSION],
            )
            .map_err(storage("open"))?;
        }
        Found::Older => {
            // Read again under the write lock: another process may have
            // migrated meanwhile.
            let current: i64 = tx
                .query_row(
                    "SELECT schema_version FROM semaphore_store WHERE id = 1",
                    [],
                    |r| r.get(0),
                )
                .map_err(storage("open"))?;
            for step in MIGRATIONS.iter().skip((current - 1).max(0) as usize) {
                tx.execute_batch(step).map_err(storage("migrate"))?;
            }
            tx.execute("UPDATE semaphore_store SET schema_version = ?1", [VERSION])
                .map_err(storage("migrate"))?;
            // Dropping `tx` on an error rolls the migration back whole.
            let (expected, migrated) = (
                expected_shape().map_err(storage("migrate"))?,
                shape(&tx).map_err(storage("migrate"))?,
            );
            if migrated != expected {
                return Err(mismatch(describe(&expected), describe(&migrated)));
            }
        }
    }
    tx.commit().map_err(storage("open"))
}
