//! [`SqliteStore`]: one SQLite file shared by threads and processes.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use rusqlite::{Connection, OpenFlags, TransactionBehavior};
use semaphore_core::{
    BorrowRequest, Changes, Clock, Error, Holder, Lease, LeaseId, PoolId, PoolState, Result, Store,
    TryBorrow, TryBorrowAll, WaiterId, async_trait,
};

use crate::error::storage;
use crate::file::Files;
use crate::time::Time;
use crate::watch::{WakeUp, Watcher, watch};
use crate::writer::WriterQueue;
use crate::{SqliteOptions, placement, queue, schema, sql};

/// A [`Store`] in one SQLite file, shared by any number of threads and
/// processes (SPEC "SQLite store").
///
/// - Every primitive is one transaction; writes are `BEGIN IMMEDIATE`
///   (R14). Times are integer unix milliseconds.
/// - One clock decides for every process on the file (SPEC "Time"): the
///   machine's, read inside each transaction. A clock given with
///   [`SqliteOptions::clock`] only times this process's waits, and one that
///   disagrees with the machine's by more than
///   [`MAX_CLOCK_SKEW`](crate::MAX_CLOCK_SKEW) is refused with
///   [`Error::ClockSkew`] at every call.
/// - Tables are prefixed `semaphore_`, so the file may be the application's
///   own. The schema version is kept in `semaphore_store`, never in
///   `user_version`.
/// - The store's connection uses WAL, `synchronous=NORMAL` (or `FULL`) and a
///   busy timeout that re-tries every 10 µs to 1 ms. A lock held past the
///   timeout is a retryable [`Error::Storage`], never
///   [`Error::Exhausted`].
/// - SQLite calls never hold up the async scheduler for long: inside a
///   tokio runtime, a transaction that will wait for nothing (the
///   connection and the writers' lock free, no `fsync` at commit) runs in
///   place, and any other on the runtime's blocking pool; outside any
///   runtime all run in place (rusqlite is synchronous). Never
///   `block_in_place`, which panics inside a `LocalSet`. Only a borrow
///   that must wait needs a tokio runtime ([`Error::NoRuntime`]
///   otherwise).
/// - Writers queue in the kernel for the file's write lock (see
///   [`SqliteOptions::queue_writers`]).
/// - If the file or its `-wal` or `-shm` file is deleted or replaced while
///   the store runs, every call fails with a non-retryable
///   [`Error::Storage`] (open the store again), where SQLite alone would
///   keep writing to unlinked files that no other process sees.
/// - A waiter learns of another process's return, count raise or delete
///   from a file-change notification on the WAL, with a fallback poll
///   ([`SqliteOptions::poll_interval`]; [`SqliteStore::wake_up`] says which
///   is in force); the heads of every process's queue are themselves queued
///   in the file, so that no process's waiters starve (R11).
/// - Dropping the store closes its connection and ends its watch threads.
///
/// ```no_run
/// use std::{sync::Arc, time::Duration};
/// use semaphore_sqlite::{Pool, PoolId, SqliteStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), semaphore_sqlite::Error> {
/// let store = Arc::new(SqliteStore::open("app.db")?);
/// let pool = Pool::new(store, PoolId::from_name("nightly-export"));
/// pool.register(3).await?;
/// let lease = pool.borrow(Duration::from_secs(600), Duration::from_secs(30)).await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct SqliteStore {
    conn: Arc<Mutex<Connection>>,
    /// The files as opened; every transaction first checks that their
    /// paths still name them.
    pub(crate) files: Arc<Files>,
    changes: Arc<Changes>,
    /// The deciding clock, and the one that times waits.
    pub(crate) time: Time,
    path: PathBuf,
    watch: Watcher,
    /// The highest token this handle handed out inside a caller-owned
    /// transaction: every later grant through it takes a larger one, so a
    /// rolled-back borrow's token is never granted again by this process.
    pub(crate) token_floor: AtomicU64,
    /// The kernel-queued writers' lock, unless turned off.
    writers: Option<Arc<WriterQueue>>,
    /// Whether a transaction that waits for nothing may run on the calling
    /// task (commits do not `fsync`).
    in_place: bool,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` with
    /// [`SqliteOptions::default`]. Blocking: it does file I/O.
    ///
    /// # Errors
    /// See [`open_with`](SqliteStore::open_with).
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, SqliteOptions::default())
    }

    /// Opens (creating if needed) the database at `path`. Blocking: it does
    /// file I/O; from async code, call it once at start-up or inside
    /// `spawn_blocking`.
    ///
    /// The file's `semaphore_` tables are checked before anything is
    /// written: a file whose tables have another shape, or a version this
    /// build does not know, is refused and left byte-for-byte unchanged.
    /// A fresh file gets the tables; an older version is migrated.
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] naming `poll_interval` if it is outside
    ///   [`MIN_POLL_INTERVAL`](crate::MIN_POLL_INTERVAL)`..=`[`MAX_POLL_INTERVAL`](crate::MAX_POLL_INTERVAL).
    /// - [`Error::SchemaMismatch`] for tables of another shape or version.
    /// - [`Error::Storage`] if the file cannot be opened or read (not a
    ///   database, missing directory), or can only be opened read-only
    ///   (`SQLITE_READONLY`, refused at once rather than at the first
    ///   borrow), or cannot be put in WAL mode, or the watch thread cannot
    ///   start: not retryable; or if another connection held a lock past
    ///   the busy timeout: retryable.
    pub fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<Self> {
        options.check()?;
        let path = path.as_ref().to_path_buf();
        let mut conn = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(storage("open"))?;
        conn.busy_handler(Some(busy_handler(options.busy_timeout)))
            .map_err(storage("open"))?;
        if conn
            .is_readonly(rusqlite::MAIN_DB)
            .map_err(storage("open"))?
        {
            return Err(Error::Storage {
                operation: "open",
                retryable: false,
                source: Box::new(rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_READONLY),
                    Some(format!(
                        "{} can only be opened read-only; the store must write it",
                        path.display()
                    )),
                )),
            });
        }
        // Processes opening a new file together can be refused with
        // SQLITE_BUSY without the busy handler being asked (SQLite does so
        // where waiting could deadlock, as when the journal mode changes
        // under a reader): the steps are idempotent, so they are tried
        // again until the busy timeout.
        let started = Instant::now();
        loop {
            match prepare(&mut conn, &options) {
                Err(Error::Storage {
                    retryable: true, ..
                }) if started.elapsed() < options.busy_timeout => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                done => break done?,
            }
        }
        let files = Files::of(&path).map_err(|e| Error::Storage {
            operation: "open",
            retryable: false,
            source: Box::new(std::io::Error::new(
                e.kind(),
                format!(
                    "{} and its -wal and -shm files in WAL mode: {e}",
                    path.display()
                ),
            )),
        })?;

        let writers = options
            .queue_writers
            .then(|| WriterQueue::open(&path).map(Arc::new))
            .transpose()
            .map_err(|e| Error::Storage {
                operation: "open",
                retryable: false,
                source: Box::new(io::Error::new(
                    e.kind(),
                    format!("{}-semaphore-writer and -turnstile: {e}", path.display()),
                )),
            })?;
        let changes = Arc::new(Changes::new());
        let watcher =
            watch(&path, changes.clone(), options.poll_interval).map_err(|e| Error::Storage {
                operation: "open",
                retryable: false,
                source: Box::new(e),
            })?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
            files: Arc::new(files),
            changes,
            time: options.time,
            path,
            watch: watcher,
            token_floor: AtomicU64::new(0),
            writers,
            in_place: matches!(options.synchronous, crate::Synchronous::Normal),
        })
    }

    /// The database file's path, as given to `open`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How waiters in this process learn of other processes' commits: a
    /// file watch backed by the poll, or the poll alone if the platform
    /// could not watch the file (a warning is then logged through
    /// `tracing`).
    pub fn wake_up(&self) -> WakeUp {
        self.watch.wake_up()
    }

    /// The number of queued heads of `pool`: store handles (normally one
    /// per process) whose borrowers wait on the pool, this one included,
    /// as the file records them. Each handle queues its own waiters in
    /// memory and only its head in the file, so the total number of waiters
    /// across processes is not known to any one of them: add
    /// [`Pool::waiting`](semaphore_core::Pool::waiting) of each process for
    /// that.
    ///
    /// # Errors
    /// [`Error::Storage`] if the file cannot be read.
    pub async fn queue_heads(&self, pool: PoolId) -> Result<u32> {
        self.run(
            "queue_heads",
            TransactionBehavior::Deferred,
            move |c, now| queue::queue_heads(c, pool, now),
        )
        .await
    }

    pub(crate) fn floor(&self) -> u64 {
        self.token_floor.load(Ordering::Acquire)
    }

    /// Runs `f` in one transaction, handing it the deciding instant read
    /// inside the transaction (unix ms); where it runs, and after which
    /// lock, is [`placement`](crate::placement)'s.
    async fn run<T: Send + 'static>(
        &self,
        operation: &'static str,
        behavior: TransactionBehavior,
        f: impl FnOnce(&Connection, i64) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T> {
        let write = matches!(behavior, TransactionBehavior::Immediate);
        let writers = self.writers.clone().filter(|_| write);
        let in_place = self.in_place && (!write || writers.is_some());
        let (files, time) = (self.files.clone(), self.time.clone());
        let transaction = move |conn: &mut Connection| -> Result<T> {
            files.check().map_err(|e| Error::Storage {
                operation,
                retryable: false,
                source: Box::new(e),
            })?;
            let tx = conn
                .transaction_with_behavior(behavior)
                .map_err(storage(operation))?;
            let now = time.now()?;
            let out = f(&tx, now).map_err(storage(operation))?;
            tx.commit().map_err(storage(operation))?;
            Ok(out)
        };
        placement::run(&self.conn, writers, in_place, operation, transaction).await
    }

    async fn write<T: Send + 'static>(
        &self,
        operation: &'static str,
        f: impl FnOnce(&Connection, i64) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T> {
        self.run(operation, TransactionBehavior::Immediate, f).await
    }
}

/// The tables (created or migrated), then WAL and the synchronous mode;
/// ends with a read, so that the -wal and -shm files exist before they are
/// identified.
fn prepare(conn: &mut Connection, options: &SqliteOptions) -> Result<()> {
    let found = schema::inspect(conn)?;
    // Tables first, WAL after: a refused migration rolls back and leaves
    // the file as it was, journal mode included.
    schema::prepare(conn, found)?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(storage("open"))?;
    conn.pragma_update(None, "synchronous", options.synchronous.pragma())
        .map_err(storage("open"))?;
    conn.query_row("SELECT COUNT(*) FROM semaphore_store", [], |_| Ok(()))
        .map_err(storage("open"))?;
    Ok(())
}

/// SQLite's default busy handler sleeps in steps of up to 100 ms, which
/// stalls contended borrows far longer than the lock is held (tens of
/// microseconds). This one re-tries after 10 µs, growing to 1 ms.
///
/// Measured with 3 processes looping borrow / return on one file for 3 s
/// (release build, 2 cores): the default handler gave p99.9 34-104 ms and
/// a worst borrow of 106-330 ms; this one p99.9 4.6-6 ms and a worst of
/// 8-22 ms.
fn busy_handler(timeout: Duration) -> impl FnMut(i32) -> bool + Send + 'static {
    let mut started = Instant::now();
    move |attempt| {
        if attempt == 0 {
            started = Instant::now();
        }
        if started.elapsed() >= timeout {
            return false;
        }
        let pause = 10u64.saturating_mul(1 << attempt.clamp(0, 7) as u64);
        std::thread::sleep(Duration::from_micros(pause.min(1000)));
        true
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn clock(&self) -> &dyn Clock {
        self.time.clock()
    }

    fn changes(&self) -> &Changes {
        &self.changes
    }

    async fn register(&self, pool: PoolId, count: u32, _now: SystemTime) -> Result<PoolState> {
        let state = self
            .write("register", move |c, now| sql::register(c, pool, count, now))
            .await?;
        self.changes.notify(pool);
        Ok(state)
    }

    async fn inspect(&self, pool: PoolId, _now: SystemTime) -> Result<PoolState> {
        self.run("inspect", TransactionBehavior::Deferred, move |c, now| {
            sql::inspect(c, pool, now)
        })
        .await?
        .ok_or(Error::PoolNotFound { pool })
    }

    async fn delete(&self, pool: PoolId) -> Result<bool> {
        let existed = self
            .write("delete", move |c, _| sql::delete(c, pool))
            .await?;
        self.changes.notify(pool);
        Ok(existed)
    }

    async fn try_borrow(&self, request: &BorrowRequest) -> Result<TryBorrow> {
        if request.waiter.is_some() {
            // Before the check, so that any commit after it is seen.
            self.watch.arm();
        }
        let (request, floor) = (request.clone(), self.floor());
        let pool = request.pool;
        self.write("borrow", move |c, now| {
            sql::try_borrow(c, &request, floor, now)
        })
        .await?
        .ok_or(Error::PoolNotFound { pool })
    }

    async fn try_borrow_all(&self, requests: &[BorrowRequest]) -> Result<TryBorrowAll> {
        if requests.iter().any(|r| r.waiter.is_some()) {
            self.watch.arm();
        }
        let (requests, floor) = (requests.to_vec(), self.floor());
        self.write("borrow", move |c, now| {
            sql::try_borrow_all(c, &requests, floor, now)
        })
        .await?
        .map_err(|pool| Error::PoolNotFound { pool })
    }

    async fn renew(
        &self,
        pool: PoolId,
        lease: LeaseId,
        now: SystemTime,
        expires_at: SystemTime,
    ) -> Result<Option<Lease>> {
        let ttl = expires_at.duration_since(now).unwrap_or(Duration::ZERO);
        let renewed = self
            .write("renew", move |c, now| sql::renew(c, pool, lease, now, ttl))
            .await?
            .ok_or(Error::PoolNotFound { pool })?;
        if renewed.is_some() {
            self.changes.notify(pool);
        }
        Ok(renewed)
    }

    async fn holders(&self, pool: PoolId, _now: SystemTime) -> Result<Vec<Holder>> {
        self.run("holders", TransactionBehavior::Deferred, move |c, now| {
            sql::holders(c, pool, now)
        })
        .await?
        .ok_or(Error::PoolNotFound { pool })
    }

    async fn force_return(
        &self,
        pool: PoolId,
        position: u32,
        _now: SystemTime,
    ) -> Result<Option<Holder>> {
        let ended = self
            .write("force_return", move |c, now| {
                sql::force_return(c, pool, position, now)
            })
            .await?
            .ok_or(Error::PoolNotFound { pool })?;
        if ended.is_some() {
            self.changes.notify(pool);
        }
        Ok(ended)
    }

    async fn return_lease(&self, pool: PoolId, lease: LeaseId, _now: SystemTime) -> Result<bool> {
        let returned = self
            .write("return", move |c, now| {
                sql::return_lease(c, pool, lease, now)
            })
            .await?;
        if returned {
            self.changes.notify(pool);
        }
        Ok(returned)
    }

    async fn return_held(&self, lease: Lease, _now: SystemTime) -> Result<bool> {
        let returned = self
            .write("return", move |c, now| sql::return_held(c, &lease, now))
            .await?;
        if returned {
            self.changes.notify(lease.pool);
        }
        Ok(returned)
    }

    async fn leave_queue(&self, pool: PoolId, waiter: WaiterId) -> Result<()> {
        let left = self
            .write("leave_queue", move |c, _| {
                queue::leave_queue(c, pool, waiter)
            })
            .await?;
        if left {
            // A borrower refused because this head stood ahead of it may
            // now be granted; without this it waits for the file watch.
            self.changes.notify(pool);
        }
        Ok(())
    }
}
