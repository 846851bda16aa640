//! The store's tables and functions, their version, and the check that a
//! database holds what this version expects (rule "Stores").
//!
//! The version lives in `semaphore_store`, a table of the store's own. A
//! schema whose `semaphore_` tables have another shape, or a version this
//! build does not know, is refused with [`Error::SchemaMismatch`] before
//! anything is written.

use semaphore_core::store::MAX_UNIX_MS;
use semaphore_core::{Error, Result};
use tokio_postgres::Client;

use crate::error::storage;

mod migrate;
use migrate::{before_3, migrate_from, shape_3};

/// The schema version this build writes and reads. Version 1 had the same
/// tables as 2, which replaced functions only; version 3 holds weighted
/// leases: a lease's id is no longer unique per row, and a queued
/// head records its weight (`semaphore_waiters.slots`); and leases bound to
/// their holder's session (`holder`, `holder_start`), and pools that
/// drain (`semaphore_pools.draining`). Version 4 keeps one row per slot,
/// free or held (`semaphore_slots`), in place of a row per held slot
/// (`semaphore_leases`), so that grants and returns on different slots of
/// one pool commit in parallel. Version 5 binds leases to the
/// store handles' sessions (`semaphore_sessions`)
/// in place of backends: `session` replaces `holder` and `holder_start`
/// on slots and places. Version 6 has the same tables, and triggers that
/// tell a session's holder at once when someone else deletes its row or
/// cuts its end short. Version 7 has the same tables again, and
/// functions whose borrow and return of one slot, while nobody is queued,
/// each run one statement that writes only the slot and notify nobody.
/// Version 8 has the same tables and arguments; its wake-ups try the pool's
/// gate before they look at the queue, in a statement of their own, so
/// that a borrow committing its place meanwhile is seen in one or the other.
/// Version 9 has the same tables; a slot that a return hands to another
/// process's queued head lasts at most [`HANDED_BOUND_MS`] until the head
/// takes it, so that a head whose process died frees it within that bound.
/// Version 10 has the same tables; a head's leaving takes the head's lock
/// before its place and its handed slot, as the returns do (a return and a
/// leave met in a deadlock). Version 11 has the same tables; a return that
/// hands its slot to another process's queued head names the lease, and its
/// wake-up's notification carries it (`semaphore_returned` takes the lease's
/// id), for the head's process to hold on arrival. Versions 1 to 10 are
/// migrated in place
/// ([`migrate`]); the bound leases of 1 to 4 become unbound (left to
/// their ttl), since the processes that held them are gone before a
/// migration.
pub(crate) const VERSION: i32 = 11;

/// How long a slot a return handed to another process's queued head lasts
/// until the head takes it (ms): the head's process, woken by the return's
/// notification, takes it at its next look, within milliseconds; a head
/// whose process died (SIGKILL, a crash) leaves it to expire within this
/// bound, not at its session's end (R16, rule "A handed slot is held on
/// arrival": at most 1 s). The head's process holds it from the
/// notification's arrival, its session vouching until this bound, and
/// confirms it at once (version 11). A live head that looks later than this
/// finds the slot gone and asks again as a newcomer.
pub(crate) const HANDED_BOUND_MS: u64 = 1000;

/// How long a queued head's row stays without being refreshed before other
/// processes treat its process as gone, in ms.
pub(crate) use semaphore_core::store::WAITER_TTL_MS;

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
    SESSIONS,
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
            ("granted_to", "uuid", false),
            ("session", "uuid", false),
        ],
    ),
    STORE,
    WAITERS,
];

/// Version 4's tables: version 5's without sessions, with a slot's and a
/// place's holder backend in place of its session.
const SHAPE_4: &[(&str, &[Column<&str>])] = &[
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
    (
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
    ),
];

const SESSIONS: (&str, &[Column<&str>]) = (
    "semaphore_sessions",
    &[("id", "uuid", true), ("expires_at", "bigint", true)],
);

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
/// it a slot (its ttl, owner and, from version 5, session), and from
/// version 9 when it was taken and whether it is a held place.
/// (Up to version 3 without ttl, owner and session: [`shape_3`]; up to
/// version 8 without the last two: [`shape_8`].)
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
        ("session", "uuid", false),
        ("since", "bigint", false),
        ("held", "boolean", true),
    ],
);

/// The columns version 9 added to the places (see [`WAITERS`]).
pub(crate) const ADDED_IN_9: [&str; 2] = ["since", "held"];

/// The shape of versions 5 to 8: version 9's without [`ADDED_IN_9`].
fn shape_8() -> Shape {
    let mut shape = expected();
    for (table, columns) in &mut shape {
        if table == "semaphore_waiters" {
            columns.retain(|c| !ADDED_IN_9.contains(&c.0.as_str()));
        }
    }
    shape
}

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
        .replace("{handed_bound}", &HANDED_BOUND_MS.to_string())
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

/// Checks the schema and, if `migrate`, creates the tables if it holds none
/// of ours, or migrates them from an older version, in one transaction
/// serialized with other processes doing the same. Refuses, changing
/// nothing, tables of another shape or version, and, unless `migrate`,
/// missing or older ones.
pub(crate) async fn prepare(client: &Client, schema: &str, migrate: bool) -> Result<()> {
    // The shape and version are read before the schema's lock, which only
    // the script takes: another process may migrate or install between the
    // read and the script (its migration then fails here on what it already
    // changed), or commit while they are read (an old shape beside the new
    // version). Each such refusal is looked at again once that process's
    // transaction is over, which the lock waits for.
    let mut tries = 0;
    loop {
        match prepare_once(client, schema, migrate).await {
            Err(Error::SchemaMismatch { .. } | Error::Storage { .. }) if tries < 2 => {
                tries += 1;
                let wait = format!(
                    "BEGIN; SELECT pg_advisory_xact_lock(hashtext('semaphore-store:{schema}')); COMMIT;"
                );
                client.batch_execute(&wait).await.map_err(storage("open"))?;
            }
            answer => return answer,
        }
    }
}

/// One look at the schema for [`prepare`].
async fn prepare_once(client: &Client, schema: &str, migrate: bool) -> Result<()> {
    let expected = expected();
    let shape = found(client, schema).await?;
    if !shape.is_empty() {
        // A version too old for this shape reads as a mismatch of shape,
        // as does a store table that cannot be read.
        let version = version(client, schema).await;
        let wanted = match version {
            Ok(Some(1 | 2)) => before_3(),
            Ok(Some(3)) => shape_3(),
            Ok(Some(4)) => shape_of(SHAPE_4),
            Ok(Some(5..=8)) => shape_8(),
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
            Some(old @ 1..=10) if !migrate => Err(not_migrated(
                schema,
                &format!("the store's tables at schema version {old}"),
            )),
            Some(old @ 1..=10) => migrate_from(client, schema, old, &expected).await,
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
    if !migrate {
        return Err(not_migrated(
            schema,
            "none of the store's tables that this role can see (if they are there, the \
             role lacks its grants: PostgresStore::grants, `semaphore migrate --grant ROLE`)",
        ));
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

/// The refusal of a store that may not migrate (`PostgresOptions::migrate`
/// is off) and found `found` in `schema`.
fn not_migrated(schema: &str, found: &str) -> Error {
    Error::SchemaMismatch {
        expected: format!(
            "the store's tables at schema version {VERSION} in schema {schema} (migrate it \
             first, as a role that may create there: `semaphore migrate --postgres URL \
             --postgres-schema {schema}`, or PostgresStore::migrate)"
        ),
        found: found.to_string(),
    }
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
