//! The store's tables and functions, their version, and the check that a
//! database holds what this version expects (SPEC "PostgreSQL store").
//!
//! The version lives in `semaphore_store`, a table of the store's own. A
//! schema whose `semaphore_` tables have another shape, or a version this
//! build does not know, is refused with [`Error::SchemaMismatch`] before
//! anything is written.

use semaphore_core::store::MAX_UNIX_MS;
use semaphore_core::{Error, Result};
use tokio_postgres::Client;

use crate::error::storage;

/// The schema version this build writes and reads. Version 1 had the same
/// tables as 2, which replaced functions only; version 3 holds weighted
/// leases (R15): a lease's id is no longer unique per row, and a queued
/// head records its weight (`semaphore_waiters.slots`); and leases bound to
/// their holder's session (R16: `holder`, `holder_start`), and pools that
/// drain (`semaphore_pools.draining`). Version 4 keeps one row per slot,
/// free or held (`semaphore_slots`), in place of a row per held slot
/// (`semaphore_leases`), so that grants and returns on different slots of
/// one pool commit in parallel (issue 22). Versions 1 to 3 are migrated in
/// place ([`migrate`]).
pub(crate) const VERSION: i32 = 4;

/// How long a queued head's row stays without being refreshed before other
/// processes treat its process as gone (R11), in ms: three of the longest
/// poll intervals, so a head that looks once per interval keeps its place
/// even when a look comes late by up to two intervals.
pub(crate) const WAITER_TTL_MS: i64 = 4_500;

/// A head's look refreshes its row once the last refresh is older than
/// this (ms): every look at any allowed poll interval, but not every one of
/// a burst of notifications.
pub(crate) const WAITER_REFRESH_MS: i64 = 250;

/// The longest schema name echoed back in an error.
const ECHOED: usize = 64;

/// The DDL and functions of [`VERSION`], with `{s}`, `{channel}`,
/// `{max_ms}` and `{waiter_ttl}` to fill in.
const SCRIPT: &str = include_str!("schema.sql");

/// A column: name, type, and whether it is `NOT NULL`.
type Column<S> = (S, S, bool);

/// Every table of ours with its columns, in order.
type Shape = Vec<(String, Vec<Column<String>>)>;

/// The shape of every table of ours: (table, [(column, type, not null)]),
/// as `information_schema.columns` reports it, in the order of their names.
const SHAPE: &[(&str, &[Column<&str>])] = &[
    POOLS,
    (
        "semaphore_slots",
        &[
            ("pool", "uuid", true),
            ("position", "bigint", true),
            ("lease", "uuid", false),
            ("token", "bigint", false),
            ("expires_at", "bigint", true),
            ("owner", "text", false),
            ("borrow_key", "text", false),
            ("holder", "integer", false),
            ("holder_start", "bigint", false),
            ("granted_to", "uuid", false),
        ],
    ),
    STORE,
    WAITERS,
];

/// Version 3's tables (a row per held slot in `semaphore_leases`), with
/// version 4's places: [`shape_3`] takes their new columns away.
const SHAPE_3: &[(&str, &[Column<&str>])] = &[
    (
        "semaphore_leases",
        &[
            ("pool", "uuid", true),
            ("position", "bigint", true),
            ("lease", "uuid", true),
            ("token", "bigint", true),
            ("expires_at", "bigint", true),
            ("owner", "text", false),
            ("borrow_key", "text", false),
            ("holder", "integer", false),
            ("holder_start", "bigint", false),
        ],
    ),
    POOLS,
    STORE,
    WAITERS,
];

const POOLS: (&str, &[Column<&str>]) = (
    "semaphore_pools",
    &[
        ("pool", "uuid", true),
        ("count", "bigint", true),
        ("draining", "boolean", true),
    ],
);

const STORE: (&str, &[Column<&str>]) = (
    "semaphore_store",
    &[("id", "integer", true), ("schema_version", "integer", true)],
);

/// A queued head's place; from version 4 with what a return needs to hand
/// it a slot (its ttl, owner and holder).
/// (Up to version 3 without the last four: [`shape_3`].)
const WAITERS: (&str, &[Column<&str>]) = (
    "semaphore_waiters",
    &[
        ("pool", "uuid", true),
        ("waiter", "uuid", true),
        ("ticket", "bigint", true),
        ("alive_until", "bigint", true),
        ("backend", "integer", false),
        ("slots", "bigint", true),
        ("ttl", "bigint", false),
        ("owner", "text", false),
        ("holder", "integer", false),
        ("holder_start", "bigint", false),
    ],
);

/// The statements that take a version 1 or 2 schema to version 3, before
/// the script replaces the functions: the functions whose arguments or
/// rows changed are dropped (their successors differ in shape, which
/// `CREATE OR REPLACE` refuses), with the composite type they return.
const MIGRATE_TO_3: &str = "
    DROP FUNCTION IF EXISTS {s}.semaphore_try_borrow_all(
        uuid[], uuid[], bigint, uuid, text, text, bigint, integer);
    DROP FUNCTION IF EXISTS {s}.semaphore_try_borrow(
        uuid, uuid, bigint, uuid, text, text, bigint, integer, boolean);
    DROP FUNCTION IF EXISTS {s}.semaphore_renew(uuid, uuid, bigint, bigint);
    DROP FUNCTION IF EXISTS {s}.semaphore_force_return(uuid, bigint, bigint);
    DROP FUNCTION IF EXISTS {s}.semaphore_register(uuid, bigint, bigint);
    DROP TYPE IF EXISTS {s}.semaphore_attempt;
    ALTER TABLE {s}.semaphore_leases DROP CONSTRAINT IF EXISTS semaphore_leases_lease_key;
    ALTER TABLE {s}.semaphore_waiters ADD COLUMN IF NOT EXISTS slots bigint NOT NULL DEFAULT 1;
    ALTER TABLE {s}.semaphore_leases ADD COLUMN IF NOT EXISTS holder integer,
        ADD COLUMN IF NOT EXISTS holder_start bigint;
    ALTER TABLE {s}.semaphore_pools ADD COLUMN IF NOT EXISTS draining boolean NOT NULL DEFAULT false;
";

/// The statements that take a version 3 schema to version 4, after the
/// script has made the (empty) slot table: every held row moves over as it
/// is, every position below a pool's highest held one gets a free row (a
/// pool's rows are always 0 to n-1), and the old table goes; places get
/// the columns of a hand-off (none for the places already taken: those
/// heads look for themselves), and the return of version 3 goes.
const MIGRATE_TO_4: &str = "
    ALTER TABLE {s}.semaphore_waiters ADD COLUMN ttl bigint, ADD COLUMN owner text,
        ADD COLUMN holder integer, ADD COLUMN holder_start bigint;
    DROP FUNCTION IF EXISTS {s}.semaphore_return(uuid, uuid, bigint);
    INSERT INTO {s}.semaphore_slots
            (pool, position, lease, token, expires_at, owner, borrow_key, holder, holder_start)
        SELECT pool, position, lease, token, expires_at, owner, borrow_key, holder, holder_start
        FROM {s}.semaphore_leases;
    INSERT INTO {s}.semaphore_slots (pool, position)
        SELECT l.pool, g FROM (
            SELECT pool, max(position) AS top FROM {s}.semaphore_leases GROUP BY pool) l,
            generate_series(0::bigint, l.top) g
        ON CONFLICT (pool, position) DO NOTHING;
    DROP TABLE {s}.semaphore_leases;
";

/// A schema name the store accepts: 1 to 40 of `a-z`, `0-9`, `_`, not
/// starting with a digit, so that it is quoted the same everywhere and its
/// notification channel fits PostgreSQL's 63-byte names; and not one of
/// the server's own (`pg_*` is reserved for system schemas,
/// `information_schema` is the standard's catalog).
pub(crate) fn check_name(schema: &str) -> Result<()> {
    let ok = !schema.is_empty()
        && schema.len() <= 40
        && !schema.starts_with(|c: char| c.is_ascii_digit())
        && schema
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    let reserved = schema.starts_with("pg_") || schema == "information_schema";
    if ok && !reserved {
        return Ok(());
    }
    let shown: String = schema.chars().take(ECHOED).collect();
    let more = if shown.len() < schema.len() {
        format!(" ({} bytes in all)", schema.len())
    } else {
        String::new()
    };
    Err(Error::InvalidArgument {
        field: "schema",
        allowed: "1 to 40 of a-z, 0-9 and _, not starting with a digit, \
                  not pg_* or information_schema (the server's own)"
            .into(),
        got: format!("{shown:?}{more}"),
    })
}

/// The notification channel of the store in `schema`.
pub(crate) fn channel(schema: &str) -> String {
    format!("semaphore_{schema}")
}

/// `text` with the placeholders of the script filled in for `schema`.
pub(crate) fn fill(text: &str, schema: &str) -> String {
    text.replace("{s}", &format!("\"{schema}\""))
        .replace("{channel}", &channel(schema))
        .replace("{max_ms}", &MAX_UNIX_MS.to_string())
        .replace("{waiter_ttl}", &WAITER_TTL_MS.to_string())
        .replace("{waiter_refresh}", &WAITER_REFRESH_MS.to_string())
}

fn describe(shape: &Shape) -> String {
    semaphore_core::store::describe_tables(shape.iter().map(|(table, columns)| {
        let columns = columns.iter().map(|c| (c.0.as_str(), c.1.as_str()));
        (table.as_str(), columns)
    }))
}

fn expected() -> Shape {
    shape_of(SHAPE)
}

fn shape_of(tables: &[(&str, &[Column<&str>])]) -> Shape {
    tables
        .iter()
        .map(|(t, cols)| {
            let cols = cols
                .iter()
                .map(|(c, ty, nn)| ((*c).to_string(), (*ty).to_string(), *nn))
                .collect();
            ((*t).to_string(), cols)
        })
        .collect()
}

async fn found(
    client: &Client,
    schema: &str,
) -> Result<Vec<(String, Vec<(String, String, bool)>)>> {
    // Unnamed statements only (`query_typed`), here as in the primitives:
    // PgBouncer in transaction mode may refuse named ones.
    let rows = client
        .query_typed(
            "SELECT table_name::text, column_name::text, data_type::text, is_nullable = 'NO'
             FROM information_schema.columns
             WHERE table_schema = $1 AND table_name LIKE 'semaphore\\_%'
             ORDER BY table_name, ordinal_position",
            &[(&schema, tokio_postgres::types::Type::TEXT)],
        )
        .await
        .map_err(storage("open"))?;
    let mut shape: Shape = Vec::new();
    for row in rows {
        let table: String = row.get(0);
        let column = (row.get(1), row.get(2), row.get(3));
        match shape.last_mut() {
            Some((t, cols)) if *t == table => cols.push(column),
            _ => shape.push((table, vec![column])),
        }
    }
    Ok(shape)
}

async fn version(client: &Client, schema: &str) -> Result<Option<i32>> {
    let sql = fill(
        "SELECT schema_version FROM {s}.semaphore_store WHERE id = 1",
        schema,
    );
    client
        .query_typed(&sql, &[])
        .await
        .map(|rows| rows.first().map(|r| r.get(0)))
        .map_err(|e| Error::SchemaMismatch {
            expected: format!("semaphore_store at version {VERSION}"),
            found: format!("unreadable semaphore_store: {e}"),
        })
}

/// Checks the schema and, if it holds none of our tables, creates them, in
/// one transaction serialized with other processes doing the same. Refuses,
/// changing nothing, tables of another shape or version.
pub(crate) async fn prepare(client: &Client, schema: &str) -> Result<()> {
    let expected = expected();
    let shape = found(client, schema).await?;
    if !shape.is_empty() {
        // A version too old for this shape reads as a mismatch of shape,
        // as does a store table that cannot be read.
        let version = version(client, schema).await;
        let wanted = match version {
            Ok(Some(1 | 2)) => before_3(),
            Ok(Some(3)) => shape_3(),
            _ => expected.clone(),
        };
        if shape != wanted {
            return Err(Error::SchemaMismatch {
                expected: describe(&wanted),
                found: describe(&shape),
            });
        }
        return match version? {
            Some(VERSION) => Ok(()),
            Some(old @ 1..=3) => migrate(client, schema, old, &expected).await,
            Some(v) if v > VERSION => Err(Error::SchemaMismatch {
                expected: format!("schema version {VERSION} or older"),
                found: format!("schema version {v}: written by a newer version of this library"),
            }),
            found => Err(Error::SchemaMismatch {
                expected: format!("semaphore_store with schema version {VERSION}"),
                found: format!("{found:?}"),
            }),
        };
    }
    install(client, schema).await?;
    let made = found(client, schema).await?;
    if made != expected {
        return Err(Error::SchemaMismatch {
            expected: describe(&expected),
            found: describe(&made),
        });
    }
    Ok(())
}

/// The shape of version 3: [`SHAPE_3`], whose places lack what a hand-off
/// needs.
fn shape_3() -> Shape {
    let mut shape = shape_of(SHAPE_3);
    for (table, columns) in &mut shape {
        if table == "semaphore_waiters" {
            columns.retain(|c| !["ttl", "owner", "holder", "holder_start"].contains(&c.0.as_str()));
        }
    }
    shape
}

/// The shape of versions 1 and 2: that of 3 without a queued head's weight
/// or a lease's holder.
fn before_3() -> Shape {
    let mut shape = shape_3();
    for (_, columns) in &mut shape {
        columns
            .retain(|c| !["slots", "holder", "holder_start", "draining"].contains(&c.0.as_str()));
    }
    shape
}

/// Versions 1 to 3 to 4, in one transaction serialized with other
/// processes doing the same: from 1 or 2, [`MIGRATE_TO_3`] first (every
/// lease of those is one row, so the leases need no change); then the
/// script, then [`MIGRATE_TO_4`] and the version: all of it or none. The
/// shape is checked again after.
async fn migrate(client: &Client, schema: &str, old: i32, expected: &Shape) -> Result<()> {
    let before = if old < 3 {
        fill(MIGRATE_TO_3, schema)
    } else {
        String::new()
    };
    let after = fill(
        &format!(
            "{MIGRATE_TO_4}
             UPDATE {{s}}.semaphore_store SET schema_version = {VERSION} WHERE id = 1 AND schema_version < {VERSION};"
        ),
        schema,
    );
    run_script(client, schema, &before, &after)
        .await
        .map_err(storage("migrate"))?;
    let migrated = found(client, schema).await?;
    if &migrated != expected {
        return Err(Error::SchemaMismatch {
            expected: describe(expected),
            found: describe(&migrated),
        });
    }
    Ok(())
}

/// Runs the script (idempotent: tables if missing, functions replaced) and
/// records the version if none is, in one transaction serialized with
/// other processes doing the same.
async fn install(client: &Client, schema: &str) -> Result<()> {
    run_script(client, schema, "", "")
        .await
        .map_err(storage("open"))
}

/// The script between `before` and `after`, under the schema's advisory
/// lock, as one simple query: one implicit transaction, one round trip.
async fn run_script(
    client: &Client,
    schema: &str,
    before: &str,
    after: &str,
) -> std::result::Result<(), tokio_postgres::Error> {
    let script = format!(
        "SET LOCAL client_min_messages = warning;
         SELECT pg_advisory_xact_lock(hashtext('semaphore-store:{schema}'));
         CREATE SCHEMA IF NOT EXISTS \"{schema}\";
         {before}
         {}
         INSERT INTO \"{schema}\".semaphore_store (id, schema_version) VALUES (1, {VERSION})
             ON CONFLICT (id) DO NOTHING;
         {after}",
        fill(SCRIPT, schema)
    );
    client.batch_execute(&script).await
}
