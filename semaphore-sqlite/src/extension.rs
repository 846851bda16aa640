//! The store's primitives on a connection that someone else owns and
//! drives: the SQLite loadable extension's (crate `semaphore-sqlite-ext`),
//! which runs them for Python's `sqlite3`, the `sqlite3` shell, or any
//! program that loads it.
//!
//! Same file, same rules: every call here runs the statements a
//! [`SqliteStore`](crate::SqliteStore) runs, in the same schema, read by
//! the same clock (the machine's, rule "Time"), with the same holder
//! binding (a bound lease is freed the moment its process is gone,
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
//! poll. It never takes a slot owed to a head queued ahead: a
//! borrower here has no place of its own, so it is served only when free
//! slots outnumber what the queued heads of every process are owed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior};
use semaphore_core::store::TryBorrow;
use semaphore_core::{
    BorrowOptions, Error, Holder, Lease, LeaseId, Limits, PoolId, PoolState, Result,
};

use crate::error::storage;
use crate::file::FileIdentity;
use crate::holder::Holders;
use crate::time::ms;
use crate::wake::doorbell::{FileId, ring_from_outside};
use crate::wake::queue;
use crate::{schema, sql};

/// The store on one database file, as seen through a connection its user
/// owns.
///
/// Make one per connection with [`Attached::open`], and pass that
/// connection to each call. Every call checks that the connection is still
/// on the file it was made for (its `-wal` and `-shm` files too, once
/// seen), and that no temporary table of the connection shadows one of
/// the store's.
///
/// Bound leases belong to the process, not to the connection: all
/// the `Attached` of one process on one file share one holder, which lives
/// until the process ends, so a lease outlives the connection that took
/// it (a program may close it, or let it be collected) and ends, at once,
/// with the process. They share one token floor too: a borrow rolled
/// back with its caller's transaction never has its token granted again
/// through any connection of the process.
#[derive(Debug)]
pub struct Attached {
    file: FileIdentity,
    /// The file's `-wal` and `-shm` files, once seen.
    journals: Mutex<[Option<FileIdentity>; 2]>,
    path: PathBuf,
    limits: Limits,
    /// A transaction of a call's own that could not be rolled back (an
    /// interrupt fails every statement until the caller's statement ends):
    /// the next call rolls it back first.
    dangling: AtomicBool,
}

/// The name of the savepoint that marks a call's own transaction, by
/// which the next call knows a transaction left open is that one.
const OWN: &str = "semaphore_extension_call";

/// What one process keeps of one file, whatever its connections: its
/// holder of bound leases, and the highest token it granted, above
/// which its later grants go, so that a borrow rolled back with its
/// caller's transaction never has its token granted again by this process.
#[derive(Debug)]
struct InProcess {
    holders: Holders,
    floor: AtomicU64,
}

/// This process's [`InProcess`] for the file `file`: one per file, kept
/// until the process ends.
///
/// A child `fork`ed after the holder was made inherits the holder's files
/// but not its lock (a record lock is the process's alone), so the child's
/// leases, made under the parent's id, would be taken for gone with the
/// parent while the child lives. So a holder is the process's whose id
/// made it; the first call in a child closes the inherited files (the
/// parent's lock stays the parent's) and makes the child a holder of its own.
fn in_process(file: FileId, path: &Path) -> Arc<InProcess> {
    /// Each file's, and the id of the process that made it.
    type Made = HashMap<FileId, (u32, Arc<InProcess>)>;
    static MADE: OnceLock<Mutex<Made>> = OnceLock::new();
    let me = std::process::id();
    let make = || {
        Arc::new(InProcess {
            holders: Holders::new(path),
            floor: AtomicU64::new(0),
        })
    };
    let mut made = MADE
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let (made_by, ours) = made.entry(file).or_insert_with(|| (me, make()));
    if *made_by != me {
        *made_by = me;
        *ours = make();
    }
    ours.clone()
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
        let attached = Self {
            path,
            file,
            journals: Mutex::default(),
            limits: Limits::default(),
            dangling: AtomicBool::new(false),
        };
        attached.check(conn)?;
        Ok(attached)
    }

    /// The limits the calls check their arguments against (the defaults).
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Creates pool `pool` with `count` slots, or sets its count; its
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
            let state = sql::register(c, pool, count, now, &self.ours().holders)?;
            Ok((state, true))
        })
    }

    /// Pool `pool`'s count, slots in use and drain.
    ///
    /// # Errors
    /// [`Error::PoolNotFound`]; a storage error.
    pub fn inspect(&self, conn: &Connection, pool: PoolId) -> Result<PoolState> {
        self.read(conn, "inspect", |c, now| {
            sql::inspect(c, pool, now, &self.ours().holders)
        })?
        .ok_or(Error::PoolNotFound { pool })
    }

    /// The `options.slots` lowest free positions of
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
        let ours = self.ours();
        let floor = ours.floor.load(Ordering::Acquire);
        let answer = self.write(conn, "borrow", pool, |c, now| {
            let answer = sql::try_borrow(c, &request, floor, now, &ours.holders)?;
            Ok((answer, false))
        })??;
        if let TryBorrow::Granted { lease } = &answer
            && lease.id == request.lease
        {
            ours.floor.fetch_max(lease.token, Ordering::AcqRel);
        }
        Ok(answer)
    }

    /// Returns lease `lease` of `pool`; `true` if it was active. Rings
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
            sql::holders(c, pool, now, &self.ours().holders)
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
        let (out, queued, rings) = self
            .own(conn, TransactionBehavior::Immediate, |tx| {
                let now = ms(SystemTime::now());
                let queued = queue::processes_queued(tx, pool, now)?;
                let (out, rings) = f(tx, now)?;
                Ok((out, queued, rings))
            })
            .map_err(storage(operation))?;
        if rings {
            ring_from_outside(self.file_id(), pool, &queued);
        }
        Ok(out)
    }

    /// Runs `f` in a transaction of the call's own on `conn` (in
    /// autocommit), marked by the savepoint [`OWN`]. If it fails and the
    /// transaction cannot be rolled back (the caller's statement was
    /// interrupted: SQLite then fails every statement until it ends), the
    /// next call rolls it back ([`Attached::check`]); if the interrupt came
    /// before the mark, the error says to roll back, since the next call
    /// could not tell that transaction from one the caller began since.
    fn own<T>(
        &self,
        conn: &Connection,
        behavior: TransactionBehavior,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        let mut marked = false;
        // (A `BEGIN` interrupted after it began the transaction fails with
        // the transaction open.)
        let out = Transaction::new_unchecked(conn, behavior).and_then(|tx| {
            tx.execute_batch(&format!("SAVEPOINT {OWN}"))
                .and_then(|()| {
                    marked = true;
                    f(&tx)
                })
                .and_then(|out| tx.commit().map(|()| out))
        });
        match out {
            // `tx`'s own rollback failed too.
            Err(e) if !conn.is_autocommit() && marked => {
                self.dangling.store(true, Ordering::Release);
                Err(e)
            }
            Err(e) if !conn.is_autocommit() => Err(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
                Some(format!(
                    "{e}, as the call began its own transaction, which it could not roll \
                     back: the connection holds the file's write lock until you run ROLLBACK"
                )),
            )),
            out => out,
        }
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
        self.own(conn, TransactionBehavior::Deferred, |tx| {
            f(tx, ms(SystemTime::now()))
        })
        .map_err(storage(operation))
    }

    /// Before every call: rolls back a transaction of an earlier call left
    /// open; then checks that `conn` is on the file this was made for,
    /// which its path still names, as do the paths of its `-wal` and
    /// `-shm` files once seen (a file replaced under a connection is
    /// refused: what it writes there, no other process sees); and that no
    /// temporary table of `conn` shadows one of the store's, which the
    /// store's statements would then read and write instead.
    fn check(&self, conn: &Connection) -> Result<()> {
        if self.dangling.load(Ordering::Acquire) {
            self.roll_back_dangling(conn)?;
        }
        let path = file_of(conn)?;
        if !self.file.names(&path) {
            return Err(Error::Storage {
                operation: "check",
                retryable: false,
                source: Box::new(std::io::Error::other(format!(
                    "{} is not the file the extension was loaded on (it was deleted or \
                     replaced): what this connection writes, no other process would see; \
                     open a new connection and load the extension again",
                    path.display()
                ))),
            });
        }
        let mut journals = self
            .journals
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (seen, suffix) in journals.iter_mut().zip(["-wal", "-shm"]) {
            let mut name = path.clone().into_os_string();
            name.push(suffix);
            let name = PathBuf::from(name);
            match seen {
                Some(seen) => seen.check().map_err(|e| Error::Storage {
                    operation: "check",
                    retryable: false,
                    source: Box::new(e),
                })?,
                None => *seen = FileIdentity::of(&name).ok(),
            }
        }
        let shadowed: Option<String> = conn
            .prepare_cached(
                "SELECT name FROM temp.sqlite_master WHERE type = 'table'
                 AND name LIKE 'semaphore\\_%' ESCAPE '\\' LIMIT 1",
            )
            .and_then(|mut s| s.query_row([], |r| r.get(0)).optional())
            .map_err(storage("check"))?;
        if let Some(table) = shadowed {
            return Err(Error::InvalidArgument {
                field: "connection",
                allowed: "a connection without temporary tables named as the store's".into(),
                got: format!("a temporary table {table} (DROP TABLE temp.{table})"),
            });
        }
        Ok(())
    }

    /// Rolls back the transaction an earlier call of its own left open, if
    /// it is still open: it is ours if it holds our savepoint, else the
    /// caller ended ours (and may have begun another). The mark is cleared
    /// only once that is known, so a rollback that fails again (interrupted
    /// anew) is tried again by the next call, and no call runs inside that
    /// transaction meanwhile.
    ///
    /// # Errors
    /// [`Error::Storage`] if the rollback failed: the call is refused.
    fn roll_back_dangling(&self, conn: &Connection) -> Result<()> {
        if conn.is_autocommit() {
            self.dangling.store(false, Ordering::Release);
            return Ok(());
        }
        let refused = |e: rusqlite::Error| Error::Storage {
            operation: "rollback",
            retryable: true,
            source: Box::new(std::io::Error::other(format!(
                "rolling back the transaction an interrupted semaphore_ call left open \
                 failed ({e}); call again, or run ROLLBACK"
            ))),
        };
        match conn.execute_batch(&format!("ROLLBACK TO {OWN}")) {
            Ok(()) => conn.execute_batch("ROLLBACK").map_err(refused)?,
            Err(e) if e.to_string().contains("no such savepoint") => {}
            Err(e) => return Err(refused(e)),
        }
        self.dangling.store(false, Ordering::Release);
        Ok(())
    }

    /// What this process keeps of the file.
    fn ours(&self) -> Arc<InProcess> {
        in_process(self.file.id(), &self.path)
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
