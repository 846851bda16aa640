//! The store's primitives on a connection that someone else owns and
//! drives: the SQLite loadable extension's (crate `semaphore-sqlite-ext`),
//! which runs them for Python's `sqlite3`, the `sqlite3` shell, or any
//! program that loads it (issue 41).
//!
//! Same file, same rules: every call here runs the statements a
//! [`SqliteStore`](crate::SqliteStore) runs, in the same schema, read by
//! the same clock (the machine's, rule "Time"), with the same holder
//! binding (R16: a bound lease is freed the moment its process is gone,
//! through a kernel lock its process holds), so that Rust
//! processes and others share pools on one file as equals. What differs
//! is who owns the transaction:
//!
//! - On a connection in autocommit, each call is one transaction of its
//!   own, `BEGIN IMMEDIATE` for the calls that write (a deferred one that
//!   reads first could fail at its first write, whatever the busy
//!   timeout); after its commit, a call that can let a waiter in rings the
//!   processes whose heads wait on the pool, as a store handle's commit
//!   does (the crate's README, "Runtime, threads and wake-ups").
//! - Inside the caller's transaction, each call runs in a savepoint of its
//!   own (a failed call leaves the transaction as it was) and commits or
//!   rolls back with the caller's writes. Waiters learn of that commit
//!   through the file watch, as of any other process's commit.
//!
//! No call waits: a borrow that finds no free slot answers
//! [`TryBorrow::Exhausted`] with the earliest expiry, for the caller to
//! poll. It never takes a slot owed to a head queued ahead (R11): a
//! borrower here has no place of its own, so it is served only when free
//! slots outnumber what the queued heads of every process are owed.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use rusqlite::{Connection, Transaction, TransactionBehavior};
use semaphore_core::store::TryBorrow;
use semaphore_core::{
    BorrowOptions, Error, Holder, Lease, LeaseId, Limits, PoolId, PoolState, Result,
};

use crate::doorbell::{FileId, ring_from_outside};
use crate::error::storage;
use crate::file::FileIdentity;
use crate::holder::Holders;
use crate::time::{instant, ms};
use crate::{queue, schema, sql};

/// The store on one database file, as seen through connections its user
/// owns: the process's holder of bound leases on that file, and the token
/// floor of its grants (R9).
///
/// Make one per file (per connection is fine too: each then has a holder
/// of its own) with [`Attached::open`], and pass the caller's connection
/// to each call. Every call checks that the connection is on the file it
/// was made for.
#[derive(Debug)]
pub struct Attached {
    file: FileIdentity,
    holders: Holders,
    limits: Limits,
    /// The highest token this process granted: later grants are above it,
    /// so that a borrow rolled back with its caller's transaction never
    /// has its token granted again by this process (R9).
    floor: AtomicU64,
}

impl Attached {
    /// Checks the tables of the file `conn` is open on, and creates them
    /// in a file that has none (or migrates an older version), in one
    /// `BEGIN IMMEDIATE` transaction; a file whose `semaphore_` tables
    /// have another shape or a newer version is refused, nothing written.
    /// Pools get the default [`Limits`].
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] naming `connection` if it is on no
    ///   file (an in-memory or temporary database), or inside a
    ///   transaction while the tables must still be made.
    /// - [`Error::SchemaMismatch`] for tables of another shape or version.
    /// - [`Error::Storage`] if SQLite failed (`SQLITE_BUSY` past the
    ///   connection's busy timeout is retryable).
    pub fn open(conn: &Connection) -> Result<Self> {
        let path = file_of(conn)?;
        match schema::inspect(conn)? {
            schema::Found::Current => {}
            found if conn.is_autocommit() => schema::prepare(conn, found)?,
            _ => {
                return Err(Error::InvalidArgument {
                    field: "connection",
                    allowed: "a connection in autocommit the first time, while the \
                              store's tables are made"
                        .into(),
                    got: "a connection inside a transaction".into(),
                });
            }
        }
        let file = FileIdentity::of(&path).map_err(|e| Error::Storage {
            operation: "open",
            retryable: false,
            source: Box::new(e),
        })?;
        Ok(Self {
            holders: Holders::new(&path),
            file,
            limits: Limits::default(),
            floor: AtomicU64::new(0),
        })
    }

    /// R2: creates pool `pool` with `count` slots, or sets its count; its
    /// state. Rings the heads of other processes (a raised count can let
    /// them in).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming `count` above the limits'
    /// `max_count`, or `connection` (see [`open`](Self::open)); a storage
    /// error.
    pub fn register(&self, conn: &Connection, pool: PoolId, count: u32) -> Result<PoolState> {
        let count = self.limits.check_count(count)?;
        self.write(conn, "register", pool, |c, now| {
            let state = sql::register(c, pool, count, now, &self.holders)?;
            Ok((state, true))
        })
    }

    /// R3: pool `pool`'s count, slots in use and drain.
    ///
    /// # Errors
    /// [`Error::PoolNotFound`]; a storage error.
    pub fn inspect(&self, conn: &Connection, pool: PoolId) -> Result<PoolState> {
        self.read(conn, "inspect", |c, now| {
            sql::inspect(c, pool, now, &self.holders)
        })?
        .ok_or(Error::PoolNotFound { pool })
    }

    /// R5, R6, R11, R15, R16: the `options.slots` lowest free positions of
    /// `pool` for `ttl`, if free beyond what the heads queued in every
    /// process are owed; else [`TryBorrow::Exhausted`] with the earliest
    /// expiry of an active lease. A keyed borrow whose lease is active gets
    /// it as it stands. A bound lease (the default) is this process's, and
    /// is freed when the process ends, however it ends.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming `ttl` (zero), `slots`, `key` or
    /// `owner` as for [`Pool::borrow_with`](semaphore_core::Pool::borrow_with);
    /// [`Error::PoolNotFound`], [`Error::Draining`], [`Error::KeyReused`];
    /// a storage error.
    pub fn borrow(
        &self,
        conn: &Connection,
        pool: PoolId,
        ttl: Duration,
        options: &BorrowOptions,
    ) -> Result<TryBorrow> {
        let request = crate::tx::request(pool, &self.limits, ttl, options)?;
        let floor = self.floor.load(Ordering::Acquire);
        let answer = self.write(conn, "borrow", pool, |c, now| {
            let answer = sql::try_borrow(c, &request, floor, now, &self.holders)?;
            Ok((answer, false))
        })??;
        if let TryBorrow::Granted { lease } = &answer
            && lease.id == request.lease
        {
            self.floor.fetch_max(lease.token, Ordering::AcqRel);
        }
        Ok(answer)
    }

    /// R8: returns lease `lease` of `pool`; `true` if it was active. Rings
    /// the heads of other processes when it was.
    ///
    /// # Errors
    /// A storage error.
    pub fn return_lease(&self, conn: &Connection, pool: PoolId, lease: LeaseId) -> Result<bool> {
        self.write(conn, "return", pool, |c, now| {
            let returned = sql::return_lease(c, pool, lease, now)?;
            Ok((returned, returned))
        })
    }

    /// Renews lease `lease` of `pool` to expire `ttl` from now, keeping
    /// its positions and token; `None` if it is not active.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming `ttl` (zero);
    /// [`Error::PoolNotFound`]; a storage error.
    pub fn renew(
        &self,
        conn: &Connection,
        pool: PoolId,
        lease: LeaseId,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        let ttl = self.limits.clamp_ttl(ttl)?;
        self.write(conn, "renew", pool, |c, now| {
            let renewed = sql::renew(c, pool, lease, now, ttl)?;
            let rings = matches!(renewed, Some(Some(_)));
            Ok((renewed, rings))
        })?
        .ok_or(Error::PoolNotFound { pool })
    }

    /// The active leases of `pool`, lowest position first.
    ///
    /// # Errors
    /// [`Error::PoolNotFound`]; a storage error.
    pub fn holders(&self, conn: &Connection, pool: PoolId) -> Result<Vec<Holder>> {
        self.read(conn, "holders", |c, now| {
            sql::holders(c, pool, now, &self.holders)
        })?
        .ok_or(Error::PoolNotFound { pool })
    }

    /// Ends the lease holding `position` of `pool`, whoever holds it (an
    /// operator's tool); the holder it ended, if any.
    ///
    /// # Errors
    /// [`Error::PoolNotFound`]; a storage error.
    pub fn force_return(
        &self,
        conn: &Connection,
        pool: PoolId,
        position: u32,
    ) -> Result<Option<Holder>> {
        self.write(conn, "force_return", pool, |c, now| {
            let ended = sql::force_return(c, pool, position, now)?;
            let rings = matches!(ended, Some(Some(_)));
            Ok((ended, rings))
        })?
        .ok_or(Error::PoolNotFound { pool })
    }

    /// The machine's clock now, as the store's times are kept: whole unix
    /// milliseconds.
    pub fn now(&self) -> SystemTime {
        instant(ms(SystemTime::now()))
    }

    /// Runs `f` as a write of `pool`: in a `BEGIN IMMEDIATE` transaction of
    /// its own in autocommit, ringing the heads of other processes after
    /// the commit if `f` says its change can let one in; in a savepoint of
    /// the caller's transaction otherwise.
    fn write<T>(
        &self,
        conn: &Connection,
        operation: &'static str,
        pool: PoolId,
        f: impl FnOnce(&Connection, i64) -> rusqlite::Result<(T, bool)>,
    ) -> Result<T> {
        self.check(conn)?;
        if !conn.is_autocommit() {
            let now = ms(SystemTime::now());
            let (out, _) = sql::in_savepoint(conn, |c| f(c, now)).map_err(storage(operation))?;
            return Ok(out);
        }
        let tx = Transaction::new_unchecked(conn, TransactionBehavior::Immediate)
            .map_err(storage(operation))?;
        let now = ms(SystemTime::now());
        let queued = queue::processes_queued(&tx, pool, now).map_err(storage(operation))?;
        let (out, rings) = f(&tx, now).map_err(storage(operation))?;
        tx.commit().map_err(storage(operation))?;
        if rings {
            ring_from_outside(self.file_id(), pool, &queued);
        }
        Ok(out)
    }

    /// Runs `f` as a read: in a deferred transaction of its own in
    /// autocommit (one snapshot), in the caller's transaction otherwise.
    fn read<T>(
        &self,
        conn: &Connection,
        operation: &'static str,
        f: impl FnOnce(&Connection, i64) -> rusqlite::Result<T>,
    ) -> Result<T> {
        self.check(conn)?;
        if !conn.is_autocommit() {
            return f(conn, ms(SystemTime::now())).map_err(storage(operation));
        }
        let tx = Transaction::new_unchecked(conn, TransactionBehavior::Deferred)
            .map_err(storage(operation))?;
        let out = f(&tx, ms(SystemTime::now())).map_err(storage(operation))?;
        tx.commit().map_err(storage(operation))?;
        Ok(out)
    }

    /// `conn` is on the file this was made for, which its path still names
    /// (rule "Stores": a file replaced under a process is refused).
    fn check(&self, conn: &Connection) -> Result<()> {
        let path = file_of(conn)?;
        if !self.file.names(&path) {
            return Err(Error::InvalidArgument {
                field: "connection",
                allowed: "a connection to the file the store was attached to".into(),
                got: format!("a connection to {}", path.display()),
            });
        }
        Ok(())
    }

    fn file_id(&self) -> FileId {
        self.file.id()
    }
}

/// The file `conn` is open on.
fn file_of(conn: &Connection) -> Result<PathBuf> {
    match conn.path().filter(|p| !p.is_empty()) {
        Some(path) => Ok(Path::new(path).to_path_buf()),
        None => Err(Error::InvalidArgument {
            field: "connection",
            allowed: "a connection to a database file".into(),
            got: "an in-memory or temporary database".into(),
        }),
    }
}
