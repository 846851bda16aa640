//! Versions 1 to 10 of the schema, taken to [`VERSION`] in place.

use semaphore_core::{Error, Result};
use tokio_postgres::Client;

use super::{SHAPE_3, Shape, VERSION, describe, fill, found, run_script, shape_of};
use crate::error::storage;

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

/// The statements that take a version 3 schema to version 5, after the
/// script has made the (empty) slot table: every held row moves over,
/// unbound (its holder's process is gone), every position below a pool's
/// highest held one gets a free row (a pool's rows are always 0 to n-1),
/// and the old table goes; places get the columns of a hand-off (none for
/// the places already taken: those heads look for themselves), and the
/// return of version 3 goes.
const MIGRATE_3_TO_5: &str = "
    ALTER TABLE {s}.semaphore_waiters ADD COLUMN ttl bigint, ADD COLUMN owner text,
        ADD COLUMN session uuid;
    DROP FUNCTION IF EXISTS {s}.semaphore_return(uuid, uuid, bigint);
    INSERT INTO {s}.semaphore_slots
            (pool, position, lease, token, expires_at, owner, borrow_key)
        SELECT pool, position, lease, token, expires_at, owner, borrow_key
        FROM {s}.semaphore_leases;
    INSERT INTO {s}.semaphore_slots (pool, position)
        SELECT l.pool, g FROM (
            SELECT pool, max(position) AS top FROM {s}.semaphore_leases GROUP BY pool) l,
            generate_series(0::bigint, l.top) g
        ON CONFLICT (pool, position) DO NOTHING;
    DROP TABLE {s}.semaphore_leases;
";

/// The statements that take a version 4 schema to version 5, before the
/// script (whose functions name the new columns): slots and places trade
/// their holder backend for a session (a bound lease becomes unbound: its
/// holder's process is gone before a migration), and the functions whose
/// arguments or rows changed go, with the composite type they return.
const MIGRATE_4_TO_5: &str = "
    ALTER TABLE {s}.semaphore_slots DROP COLUMN holder, DROP COLUMN holder_start,
        ADD COLUMN session uuid;
    ALTER TABLE {s}.semaphore_waiters DROP COLUMN holder, DROP COLUMN holder_start,
        ADD COLUMN session uuid;
";

/// The statements that take a version 5 to 8 schema (or an older one,
/// once brought to 5) to version 9, after the script: a place records when
/// it was taken and whether it is a held place (unknown, and `false`, for
/// the places taken before).
const MIGRATE_TO_9: &str = "
    ALTER TABLE {s}.semaphore_waiters ADD COLUMN IF NOT EXISTS since bigint,
        ADD COLUMN IF NOT EXISTS held boolean NOT NULL DEFAULT false;
";

/// The functions of versions 3 and 4 whose arguments or rows changed in
/// version 5, and the composite type they returned: dropped before the
/// script makes their successors (`CREATE OR REPLACE` refuses another
/// shape of rows).
const DROP_BEFORE_5: &str = "
    DROP FUNCTION IF EXISTS {s}.semaphore_try_borrow(
        uuid, uuid, bigint, uuid, text, text, bigint, integer, boolean, bigint, integer, bigint,
        bigint);
    DROP FUNCTION IF EXISTS {s}.semaphore_try_borrow(
        uuid, uuid, bigint, uuid, text, text, bigint, integer, boolean, bigint, integer, bigint);
    DROP FUNCTION IF EXISTS {s}.semaphore_try_borrow_all(
        uuid[], uuid[], bigint, uuid, text, text, bigint, integer, bigint[], integer, bigint);
    DROP FUNCTION IF EXISTS {s}.semaphore_return_lease(
        uuid, uuid, bigint, boolean, uuid, uuid, bigint, text, integer, bigint);
    DROP FUNCTION IF EXISTS {s}.semaphore_renew(uuid, uuid, bigint, bigint);
    DROP FUNCTION IF EXISTS {s}.semaphore_handed(uuid, uuid, bigint);
    DROP FUNCTION IF EXISTS {s}.semaphore_in_use(uuid, bigint);
    DROP FUNCTION IF EXISTS {s}.semaphore_alive(integer, bigint);
    DROP TYPE IF EXISTS {s}.semaphore_attempt;
";

/// The wake-up of versions 1 to 10, whose arguments changed in version 11
/// (it takes the handed lease's id): dropped before the script.
const DROP_BEFORE_11: &str = "
    DROP FUNCTION IF EXISTS {s}.semaphore_returned(uuid, boolean);
";

/// The shape of version 3: [`SHAPE_3`], whose places lack what a hand-off
/// needs.
pub(super) fn shape_3() -> Shape {
    let mut shape = shape_of(SHAPE_3);
    for (table, columns) in &mut shape {
        if table == "semaphore_waiters" {
            columns.retain(|c| {
                !["ttl", "owner", "session"].contains(&c.0.as_str())
                    && !super::ADDED_IN_9.contains(&c.0.as_str())
            });
        }
    }
    shape
}

/// The shape of versions 1 and 2: that of 3 without a queued head's weight
/// or a lease's holder.
pub(super) fn before_3() -> Shape {
    let mut shape = shape_3();
    for (_, columns) in &mut shape {
        columns
            .retain(|c| !["slots", "holder", "holder_start", "draining"].contains(&c.0.as_str()));
    }
    shape
}

/// Versions 1 to 10 to [`VERSION`], in one transaction serialized with other
/// processes doing the same: from 1 or 2, [`MIGRATE_TO_3`] first (every
/// lease of those is one row, so the leases need no change); from 4,
/// [`MIGRATE_4_TO_5`]; then the script, then from 1 to 3
/// [`MIGRATE_3_TO_5`]; then the version: all of it or none (from 5, the
/// script adds what 6 adds: triggers; from 6 and 7, it replaces functions
/// that keep their arguments and rows; to 9, `semaphore_handed` goes,
/// dropped with [`DROP_BEFORE_5`], for `semaphore_take_handed`; from 9,
/// the script replaces `semaphore_leave_queue`; to 11, the wake-up goes,
/// dropped with [`DROP_BEFORE_11`], for one that takes the handed lease).
/// The shape is checked again after.
pub(super) async fn migrate_from(
    client: &Client,
    schema: &str,
    old: i32,
    expected: &Shape,
) -> Result<()> {
    let mut before = String::new();
    if old < 3 {
        before.push_str(MIGRATE_TO_3);
    }
    if old == 4 {
        before.push_str(MIGRATE_4_TO_5);
    }
    before.push_str(DROP_BEFORE_5);
    before.push_str(DROP_BEFORE_11);
    let before = fill(&before, schema);
    let moved = if old < 4 { MIGRATE_3_TO_5 } else { "" };
    let after = fill(
        &format!(
            "{moved}
             {MIGRATE_TO_9}
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
