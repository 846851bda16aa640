//! The store's tables: created if missing, their version checked.
//!
//! - `P_store`: one row, the schema version and the token floor (it
//!   outlives every pool): a pool's delete raises it to the pool's last
//!   token, so that a pool of that id registered again starts above.
//! - `P_pools`: a row per pool, its count, drain flag and last token; every
//!   step on a pool locks this row first (`FOR UPDATE`), so that steps on
//!   one pool serialize and steps on different pools do not. A grant's
//!   token is one more than the greater of the pool's last token and the
//!   store's floor, so grants on different pools share no row.
//!   (Version 2. A store of version 1, which counted every grant in the
//!   store's row, gets the column at connect: its default, 0, defers to
//!   that count, now the floor; processes of version 1 then refuse to
//!   connect, and those still running must be stopped first, as they
//!   would count on from the floor alone.)
//! - `P_leases`: a row per slot held (a lease of `n` slots has `n`
//!   rows under one id); the labels on its lowest row; `holder`, the
//!   session a bound lease belongs to (version 3).
//! - `P_sessions`: a row per store handle's session, its end on the
//!   server's clock (version 3): a bound lease is active only while its
//!   session's end is in the future.
//! - `P_waiters`: the queued heads of each pool,
//!   first come first served by an `AUTO_INCREMENT` ticket; `holder`, the
//!   id of the named lock the head's store keeps on a connection of its
//!   own (version 3): a head whose lock is free is gone; `since`, when the
//!   place was taken (version 4; `NULL` for the places taken before).
//!
//! - `P_borrow_step_6`, `P_borrow_6`, `P_borrow_in_6`: the borrow as stored
//!   procedures, the one place it is written (`borrow.sql`): the step, and
//!   one call of it in a transaction of its own (one round trip) or in the
//!   caller's (a multi-pool borrow).
//! - `P_return_1`: the return, which rings the heads of other processes
//!   its freed slots are owed to (`return.sql`).
//!
//! Labels are `VARBINARY`/`BLOB`, compared byte for byte: a key never
//! matches another that differs only in case, whatever the collation.

use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use semaphore_core::{Error, Result};

use crate::error::storage;

/// The version this library writes and reads. Version 1 counted every
/// grant's token in the store's row; version 2 counts them per pool
/// (`P_pools.last_token`); version 3 binds leases to sessions
/// (`P_sessions`) and places to their store's connection
/// (`P_waiters.holder`); version 4 records when each place was taken
/// (`P_waiters.since`). A store of version 1 to 3 is migrated at connect,
/// once the processes of the earlier release are stopped; the bound
/// leases of version 1 or 2 become unbound (left to their ttl).
pub(crate) const VERSION: i64 = 4;

/// The table names under one prefix, and the statements that name them.
#[derive(Debug, Clone)]
pub(crate) struct Tables {
    pub(crate) store: String,
    pub(crate) pools: String,
    pub(crate) leases: String,
    pub(crate) waiters: String,
    pub(crate) sessions: String,
    /// The borrow procedures' names: one call in a transaction of its own,
    /// one inside the caller's, and the step both call.
    pub(crate) borrow: String,
    pub(crate) borrow_in: String,
    borrow_step: String,
    /// The return that rings (`return.sql`).
    pub(crate) return_lease: String,
    prefix: String,
}

impl Tables {
    pub(crate) fn new(prefix: &str) -> Self {
        Self {
            store: format!("{prefix}_store"),
            pools: format!("{prefix}_pools"),
            leases: format!("{prefix}_leases"),
            waiters: format!("{prefix}_waiters"),
            sessions: format!("{prefix}_sessions"),
            borrow: format!("{prefix}_borrow_6"),
            borrow_in: format!("{prefix}_borrow_in_6"),
            borrow_step: format!("{prefix}_borrow_step_6"),
            return_lease: format!("{prefix}_return_1"),
            prefix: prefix.to_string(),
        }
    }

    /// Whether a lease row's session has ended at `now`, an SQL
    /// expression: it names one, and that session has no
    /// row or an end at or before `now`.
    pub(crate) fn gone_at(&self, now: &str) -> String {
        format!(
            "(holder IS NOT NULL AND NOT EXISTS (SELECT 1 FROM {} x \
             WHERE x.id = holder AND x.expires_at > {now}))",
            self.sessions
        )
    }

    fn create(&self) -> [String; 5] {
        let Tables {
            store,
            pools,
            leases,
            waiters,
            sessions,
            ..
        } = self;
        [
            format!(
                "CREATE TABLE IF NOT EXISTS {store} (
                    id TINYINT NOT NULL PRIMARY KEY,
                    version BIGINT NOT NULL,
                    last_token BIGINT NOT NULL
                ) ENGINE = InnoDB"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {pools} (
                    pool BINARY(16) NOT NULL PRIMARY KEY,
                    count INT UNSIGNED NOT NULL,
                    draining BOOLEAN NOT NULL DEFAULT FALSE,
                    last_token BIGINT NOT NULL DEFAULT 0
                ) ENGINE = InnoDB"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {leases} (
                    pool BINARY(16) NOT NULL,
                    position INT UNSIGNED NOT NULL,
                    lease BINARY(16) NOT NULL,
                    token BIGINT NOT NULL,
                    expires_at BIGINT NOT NULL,
                    owner VARBINARY(1024) NULL,
                    borrow_key BLOB NULL,
                    holder BINARY(16) NULL,
                    PRIMARY KEY (pool, position),
                    KEY (lease)
                ) ENGINE = InnoDB"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {waiters} (
                    pool BINARY(16) NOT NULL,
                    waiter BINARY(16) NOT NULL,
                    ticket BIGINT NOT NULL AUTO_INCREMENT,
                    alive_until BIGINT NOT NULL,
                    slots INT UNSIGNED NOT NULL,
                    holder BINARY(16) NULL,
                    since BIGINT NULL,
                    PRIMARY KEY (pool, waiter),
                    UNIQUE KEY (ticket)
                ) ENGINE = InnoDB"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {sessions} (
                    id BINARY(16) NOT NULL PRIMARY KEY,
                    expires_at BIGINT NOT NULL
                ) ENGINE = InnoDB"
            ),
        ]
    }
}

/// Creates the tables if missing and checks their version.
///
/// # Errors
/// [`Error::SchemaMismatch`] if the store row holds another version;
/// [`Error::Storage`] if the server refused (a missing privilege: the
/// user needs `CREATE` on the database the first time).
pub(crate) async fn prepare(conn: &mut Conn, tables: &Tables) -> Result<()> {
    for statement in tables.create() {
        conn.query_drop(statement).await.map_err(storage("open"))?;
    }
    conn.exec_drop(
        format!(
            "INSERT IGNORE INTO {} (id, version, last_token) VALUES (1, ?, 0)",
            tables.store
        ),
        (VERSION,),
    )
    .await
    .map_err(storage("open"))?;
    let found: Option<i64> = conn
        .query_first(format!("SELECT version FROM {} WHERE id = 1", tables.store))
        .await
        .map_err(storage("open"))?;
    match found {
        Some(1) => {
            migrate_from_1(conn, tables).await?;
            migrate_from_2(conn, tables).await?;
            migrate_from_3(conn, tables).await?;
            create_procedure(conn, tables).await
        }
        Some(2) => {
            migrate_from_2(conn, tables).await?;
            migrate_from_3(conn, tables).await?;
            create_procedure(conn, tables).await
        }
        Some(3) => {
            migrate_from_3(conn, tables).await?;
            create_procedure(conn, tables).await
        }
        Some(VERSION) => create_procedure(conn, tables).await,
        other => Err(Error::SchemaMismatch {
            expected: format!("{} version {VERSION}", tables.store),
            found: match other {
                Some(v) => format!("{} version {v}", tables.store),
                None => format!("{} without its row", tables.store),
            },
        }),
    }
}

/// Makes a store of version 1 one of version 2: adds `P_pools.last_token`,
/// then sets the version. Two processes may both find the column missing:
/// the one that loses the race is told it exists (1060, duplicate column).
async fn migrate_from_1(conn: &mut Conn, tables: &Tables) -> Result<()> {
    let found: Option<i64> = conn
        .exec_first(
            "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() \
             AND TABLE_NAME = ? AND COLUMN_NAME = 'last_token'",
            (&tables.pools,),
        )
        .await
        .map_err(storage("open"))?;
    if found.unwrap_or_default() == 0 {
        let alter = format!(
            "ALTER TABLE {} ADD COLUMN last_token BIGINT NOT NULL DEFAULT 0",
            tables.pools
        );
        match conn.query_drop(alter).await {
            Ok(()) => {}
            Err(mysql_async::Error::Server(e)) if e.code == 1060 => {}
            Err(e) => return Err(storage("open")(e)),
        }
    }
    conn.exec_drop(
        format!(
            "UPDATE {} SET version = 2 WHERE id = 1 AND version = 1",
            tables.store
        ),
        (),
    )
    .await
    .map_err(storage("open"))
}

/// Makes a store of version 2 one of version 3: the sessions table (made
/// by [`Tables::create`]), `P_waiters.holder`, and every lease unbound (a
/// lease of version 2 named its holder's named lock, not a session; its
/// process is gone before a migration); then sets the version. Two
/// processes may both add the column: the loser is told it exists (1060).
async fn migrate_from_2(conn: &mut Conn, tables: &Tables) -> Result<()> {
    let alter = format!(
        "ALTER TABLE {} ADD COLUMN holder BINARY(16) NULL",
        tables.waiters
    );
    match conn.query_drop(alter).await {
        Ok(()) => {}
        Err(mysql_async::Error::Server(e)) if e.code == 1060 => {}
        Err(e) => return Err(storage("open")(e)),
    }
    let mut tx = conn
        .start_transaction(mysql_async::TxOpts::default())
        .await
        .map_err(storage("open"))?;
    let found: Option<i64> = tx
        .query_first(format!(
            "SELECT version FROM {} WHERE id = 1 FOR UPDATE",
            tables.store
        ))
        .await
        .map_err(storage("open"))?;
    if found == Some(2) {
        tx.query_drop(format!("UPDATE {} SET holder = NULL", tables.leases))
            .await
            .map_err(storage("open"))?;
        tx.query_drop(format!(
            "UPDATE {} SET version = 3 WHERE id = 1",
            tables.store
        ))
        .await
        .map_err(storage("open"))?;
    }
    tx.commit().await.map_err(storage("open"))
}

/// Makes a store of version 3 one of version 4: `P_waiters.since` (the
/// places taken before have none), then the version. Two processes may
/// both add the column: the loser is told it exists (1060).
async fn migrate_from_3(conn: &mut Conn, tables: &Tables) -> Result<()> {
    let alter = format!(
        "ALTER TABLE {} ADD COLUMN since BIGINT NULL",
        tables.waiters
    );
    match conn.query_drop(alter).await {
        Ok(()) => {}
        Err(mysql_async::Error::Server(e)) if e.code == 1060 => {}
        Err(e) => return Err(storage("open")(e)),
    }
    conn.exec_drop(
        format!(
            "UPDATE {} SET version = ? WHERE id = 1 AND version = 3",
            tables.store
        ),
        (VERSION,),
    )
    .await
    .map_err(storage("open"))
}

/// Creates the borrow procedures (`borrow.sql`) and the return's
/// (`return.sql`) that are missing. Two
/// processes may both find one missing: the one that loses the race is
/// told it exists (1304).
///
/// # Errors
/// [`Error::Storage`] if the server refused (the user needs `CREATE
/// ROUTINE` the first time, and `EXECUTE`).
async fn create_procedure(conn: &mut Conn, tables: &Tables) -> Result<()> {
    let script = include_str!("borrow.sql").replace("{p}", &tables.prefix);
    let returns = include_str!("return.sql").replace("{p}", &tables.prefix);
    let bodies = script.split("\n-- ====\n").chain([returns.as_str()]);
    let names = [
        &tables.borrow_step,
        &tables.borrow,
        &tables.borrow_in,
        &tables.return_lease,
    ];
    for (name, body) in names.into_iter().zip(bodies) {
        let found: Option<i64> = conn
            .exec_first(
                "SELECT COUNT(*) FROM information_schema.ROUTINES \
                 WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_NAME = ?",
                (name,),
            )
            .await
            .map_err(storage("open"))?;
        if found.unwrap_or_default() > 0 {
            continue;
        }
        match conn.query_drop(body).await {
            Ok(()) => {}
            Err(mysql_async::Error::Server(e)) if e.code == 1304 => {}
            Err(e) => return Err(storage("open")(e)),
        }
    }
    Ok(())
}
