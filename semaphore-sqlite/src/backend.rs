//! [`SqliteStore`]: one SQLite file shared by threads and processes.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use rusqlite::{Connection, TransactionBehavior};
use semaphore_core::store::{Changes, ForkCheck};
use semaphore_core::{Error, PoolId, Result};

use crate::commit::group::Group;
use crate::commit::placement;
use crate::commit::writer::WriterQueue;
use crate::file::Files;
use crate::holder::Holders;
use crate::time::Time;
use crate::wake::doorbell::Doorbell;
use crate::wake::queue;
use crate::wake::watch::{WakeUp, Watcher, watch};
use crate::{SqliteOptions, connection};

mod primitives;

/// A [`Store`](semaphore_core::store::Store) in one SQLite file, shared by
/// any number of threads and processes (rule "Stores").
///
/// - Every primitive is atomic in one transaction; writes are `BEGIN
///   IMMEDIATE`. Times are integer unix milliseconds.
/// - Group commit (rule "Group commit"), where commits `fsync`
///   ([`Synchronous::Full`](crate::Synchronous::Full)): inside a tokio
///   runtime, this handle's writes that arrive while one of its write
///   transactions runs go together in the next, each in a savepoint of its
///   own, so that many tasks pay one `fsync`. Each keeps its own answer;
///   one that fails is rolled back alone. With `Normal` each write is its
///   own transaction: measured faster there (BENCHMARKS.md line 20).
/// - One clock decides for every process on the file (rule "Time"): the
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
/// - Checkpoints run off the borrow and return path: when a commit takes the
///   WAL past 1000 pages (SQLite's automatic threshold), a thread of the
///   store's checkpoints it (`PASSIVE`) on a connection of its own, instead
///   of the commit itself; a WAL that reaches 4000 pages (commits that never
///   pause keep it from starting again) is checkpointed in the commit's
///   path, as SQLite's own would, so it stays bounded (tens of MB). Other
///   connections to the file keep SQLite's automatic checkpoint.
/// - Writers queue in the kernel for the file's write lock (see
///   [`SqliteOptions::queue_writers`]).
/// - If the file or its `-wal` or `-shm` file is deleted or replaced while
///   the store runs, every call fails with a non-retryable
///   [`Error::Storage`] (open the store again), where SQLite alone would
///   keep writing to unlinked files that no other process sees.
/// - A waiter learns of another process's return, count raise or delete
///   when that process rings it right after its `COMMIT` (a datagram to
///   the process's socket in the abstract namespace; Linux), and otherwise
///   from a file-change notification on the WAL, with a fallback poll
///   ([`SqliteOptions::poll_interval`]; [`SqliteStore::wake_up`] says which
///   is in force); the heads of every process's queue are themselves queued
///   in the file, so that no process's waiters starve.
/// - Dropping the store closes its connection and ends its watch threads.
/// - A store is its process's: used in a child that `fork()` made of that
///   process, every call fails at once with [`Error::Forked`]; make a
///   store in the child. A bound lease's holder lock is not inherited by
///   such a child, so a holder killed with children alive still frees its
///   slots at once.
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
    /// Rings other processes' heads after a commit that can let one in.
    bell: Doorbell,
    /// The highest token this handle handed out inside a caller-owned
    /// transaction: every later grant through it takes a larger one, so a
    /// rolled-back borrow's token is never granted again by this process.
    pub(crate) token_floor: AtomicU64,
    /// The kernel-queued writers' lock, unless turned off.
    writers: Option<Arc<WriterQueue>>,
    /// Whether a transaction that waits for nothing may run on the calling
    /// task (commits do not `fsync`).
    in_place: bool,
    /// This handle's holder of bound leases and the others' liveness.
    pub(crate) holders: Arc<Holders>,
    /// Writes that wait for a turn go together ([`group`](crate::commit::group)).
    group: Arc<Group>,
    /// The process that opened it: a child forked from it is refused.
    pub(crate) process: ForkCheck,
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
    /// - [`Error::InvalidArgument`] naming `path` if it is empty or
    ///   `:memory:`: SQLite would open a private database there, which no
    ///   other process shares.
    /// - [`Error::InvalidArgument`] naming `poll_interval` if it is outside
    ///   [`MIN_POLL_INTERVAL`](crate::store::MIN_POLL_INTERVAL)`..=`[`MAX_POLL_INTERVAL`](crate::store::MAX_POLL_INTERVAL).
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
        if path.as_os_str().is_empty() || path.as_os_str() == ":memory:" {
            return Err(Error::InvalidArgument {
                field: "path",
                allowed: "the path of a database file (the store is shared through it)".into(),
                got: format!("{:?}", path.display().to_string()),
            });
        }
        let mut conn = connection::open(&path, &options)?;
        crate::checkpoint::off_the_path(&mut conn, &path);
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
        let bell = Doorbell::open(files.db.id(), Arc::downgrade(&changes));
        let watcher = watch(
            &path,
            changes.clone(),
            options.poll_interval,
            options.fallback_wake_up,
            bell.rings(),
        )
        .map_err(|e| Error::Storage {
            operation: "open",
            retryable: false,
            source: Box::new(e),
        })?;
        let conn = Arc::new(Mutex::new(conn));
        let files = Arc::new(files);
        let group = Group::new(
            conn.clone(),
            writers.clone(),
            files.clone(),
            options.time.clone(),
        );
        Ok(Self {
            conn,
            files,
            group: Arc::new(group),
            changes,
            bell,
            time: options.time,
            holders: Arc::new(Holders::new(&path)),
            path,
            watch: watcher,
            token_floor: AtomicU64::new(0),
            writers,
            in_place: matches!(options.synchronous, crate::Synchronous::Normal),
            process: ForkCheck::here(),
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
    /// lock, is [`placement`](crate::commit::placement)'s.
    async fn run<T: Send + 'static>(
        &self,
        operation: &'static str,
        behavior: TransactionBehavior,
        f: impl FnOnce(&Connection, i64) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T> {
        self.process.check(operation)?;
        let write = matches!(behavior, TransactionBehavior::Immediate);
        let writers = self.writers.clone().filter(|_| write);
        let in_place = self.in_place && (!write || writers.is_some());
        if write && !self.in_place && tokio::runtime::Handle::try_current().is_ok() {
            // Commits `fsync`: writes go in batches, one `fsync` for many
            // ([`group`](crate::commit::group)). Without it a batch saves little
            // and holds the writers' lock longer: measured slower with
            // several processes (BENCHMARKS.md line 20).
            return self.group.write(operation, f).await;
        }
        let (files, time) = (self.files.clone(), self.time.clone());
        let transaction = move |conn: &mut Connection| {
            placement::transaction(&files, &time, conn, operation, behavior, f)
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

    /// A write that can let a waiter of `pool` in when `frees` says so of
    /// its outcome: after it commits, rings the other processes whose
    /// heads queue on it (found inside the transaction, before `f` runs: a
    /// delete drops them). This process's waiters are told by the core
    /// (after a renewal, a forced return, a count, a drain or a delete) or
    /// by [`write_freeing`](Self::write_freeing).
    async fn write_ringing<T: Send + 'static>(
        &self,
        operation: &'static str,
        pool: PoolId,
        f: impl FnOnce(&Connection, i64) -> rusqlite::Result<T> + Send + 'static,
        frees: fn(&T) -> bool,
    ) -> Result<(T, bool)> {
        let rings = self.bell.rings();
        let (out, queued) = self
            .write(operation, move |c, now| {
                let queued = if rings {
                    queue::processes_queued(c, pool, now)?
                } else {
                    Vec::new()
                };
                Ok((f(c, now)?, queued))
            })
            .await?;
        let freed = frees(&out);
        if freed {
            self.bell.ring(pool, &queued);
        }
        Ok((out, freed))
    }

    /// [`write_ringing`](Self::write_ringing) that also wakes this
    /// handle's head of `pool`: for a return, and a place left in the
    /// queue, which the core does not tell of.
    async fn write_freeing<T: Send + 'static>(
        &self,
        operation: &'static str,
        pool: PoolId,
        f: impl FnOnce(&Connection, i64) -> rusqlite::Result<T> + Send + 'static,
        frees: fn(&T) -> bool,
    ) -> Result<T> {
        let (out, freed) = self.write_ringing(operation, pool, f, frees).await?;
        if freed {
            self.changes.notify(pool);
        }
        Ok(out)
    }
}

impl SqliteStore {
    /// Ends this handle's holder as a process killed outright would:
    /// its kernel lock is released, so other handles on the file treat its
    /// bound leases as gone; later bound leases of this handle are left to
    /// their ttl. For tests (feature `test-util`) of what a crash leaves.
    #[cfg(feature = "test-util")]
    pub fn abandon_holder(&self) {
        self.holders.abandon();
    }
}
