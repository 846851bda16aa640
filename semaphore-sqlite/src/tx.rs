//! Leases inside a transaction the application owns (rule "Beyond the basic
//! model": the lease and the application's own write commit or roll back
//! together).

use std::sync::atomic::Ordering;
use std::time::Duration;

use rusqlite::Connection;
use semaphore_core::store::{BorrowRequest, Store, TryBorrow};
use semaphore_core::{BorrowOptions, Error, Lease, LeaseId, Limits, Pool, PoolId, Result};

use crate::error::storage;
use crate::time::instant;
use crate::{SqliteStore, sql};

/// # Caller-owned transactions
///
/// `borrow_in`, `return_in` and `renew_in` run on a transaction (or
/// savepoint) that the application opened on its own connection to the
/// store's file, so that the lease and the application's own writes commit
/// or roll back together. They never commit, roll back or change a pragma
/// of that transaction; each runs inside a savepoint of its own, so a failed
/// call leaves the transaction as it found it.
///
/// Open the transaction with `BEGIN IMMEDIATE`
/// ([`TransactionBehavior::Immediate`](rusqlite::TransactionBehavior::Immediate)):
/// it takes the write lock up front. A deferred transaction that reads
/// before it writes fails with `SQLITE_BUSY` at its first write if another
/// connection wrote meanwhile, and no busy handler can save it. Give the
/// connection a busy timeout too; the store's own does not apply to it.
///
/// - No waiting: a transaction holds the write lock, so a borrow in it
///   either gets a free slot at once or fails with [`Error::Exhausted`].
///   It does not jump borrowers waiting in this process, nor queued
///   heads of other processes.
/// - A rolled-back borrow leaves no lease behind. Its token is never granted
///   again through this store handle, which from then on grants above it;
///   the handle's next write makes that floor part of the file. Until
///   that write, another process may grant the same number, to a lease
///   that does exist: no two committed leases ever share a token.
/// - Waiters here and in other processes learn of a commit through the
///   store's file watch, as of any other process's commit.
///
/// ```
/// use std::{sync::Arc, time::Duration};
/// use semaphore_sqlite::rusqlite::{Connection, TransactionBehavior};
/// use semaphore_sqlite::{BorrowOptions, Pool, PoolId, SqliteStore};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("app.db");
/// let store = Arc::new(SqliteStore::open(&path)?);
/// let pool = Pool::new(store.clone(), PoolId::from_name("exports"));
/// # tokio::runtime::Runtime::new()?.block_on(pool.register(2))?;
///
/// let mut conn = Connection::open(&path)?;
/// conn.execute_batch("CREATE TABLE IF NOT EXISTS jobs (slot INTEGER, token INTEGER)")?;
/// let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
/// let lease = store.borrow_in(&tx, &pool, Duration::from_secs(60), BorrowOptions::new())?;
/// tx.execute("INSERT INTO jobs VALUES (?1, ?2)", (lease.position, lease.token as i64))?;
/// tx.rollback()?; // the job row and the lease are both gone
/// # assert_eq!(tokio::runtime::Runtime::new()?.block_on(pool.inspect())?.in_use, 0);
/// # Ok(())
/// # }
/// ```
/// The request of a borrow of `pool` for `ttl` with `options`, checked
/// and clamped against `limits` as [`Pool::borrow_with`] does, under a new
/// lease id.
///
/// # Errors
/// [`Error::InvalidArgument`] naming `ttl`, `slots`, `key` or `owner`.
pub(crate) fn request(
    pool: PoolId,
    limits: &Limits,
    ttl: Duration,
    options: &BorrowOptions,
) -> Result<BorrowRequest> {
    let ttl = limits.clamp_ttl(ttl)?;
    options.validate(limits)?;
    let mut request = BorrowRequest::new(pool, LeaseId::new(), ttl);
    request.slots = options.slots;
    request.bound = options.bound;
    request.key = options
        .key
        .as_deref()
        .map(|key| semaphore_core::store::stored_key(key, options.request_digest));
    request.owner = options.owner.as_deref().map(Into::into);
    Ok(request)
}

impl SqliteStore {
    /// Borrows the lowest free slot of `pool` for `ttl` inside `tx`, without
    /// waiting. The lease exists once `tx` commits. `ttl`, the key
    /// and the owner label are checked and clamped as by
    /// [`Pool::borrow_with`], against `pool`'s limits; with a key whose
    /// lease is active, that lease is returned.
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] naming `tx` if it is not inside a
    ///   transaction or not on this store's file, `pool` if the handle is
    ///   on another store, or `ttl`, `key`, `owner` as for a borrow.
    /// - [`Error::PoolNotFound`], [`Error::Exhausted`] (waited zero).
    /// - [`Error::Storage`] if SQLite failed; `tx` is as it was.
    pub fn borrow_in(
        &self,
        tx: &Connection,
        pool: &Pool,
        ttl: Duration,
        options: BorrowOptions,
    ) -> Result<Lease> {
        self.check_tx(tx, pool)?;
        let request = request(pool.id(), pool.limits(), ttl, &options)?;
        let now = self.time.now()?;
        let exhausted = Error::Exhausted {
            pool: pool.id(),
            waited: Duration::ZERO,
        };
        // Borrowers queued in this process go first: only a keyed
        // lease already held is answered then.
        let queued = pool.waiting().count > 0;
        let answer = if queued {
            match sql::keyed(tx, pool.id(), request.key.as_deref(), now)
                .map_err(storage("borrow"))?
            {
                sql::Keyed::Same(lease) => Ok(TryBorrow::Granted { lease }),
                sql::Keyed::Reused => Err(Error::KeyReused { pool: pool.id() }),
                sql::Keyed::No => Err(exhausted),
            }
        } else {
            sql::in_savepoint(tx, |c| {
                sql::try_borrow(c, &request, self.floor(), now, &self.holders)
            })
            .map_err(storage("borrow"))?
        };
        match answer? {
            TryBorrow::Granted { lease } => {
                if lease.id == request.lease {
                    self.token_floor.fetch_max(lease.token, Ordering::AcqRel);
                }
                Ok(lease)
            }
            TryBorrow::Exhausted { .. } => Err(Error::Exhausted {
                pool: pool.id(),
                waited: Duration::ZERO,
            }),
        }
    }

    /// Returns lease `lease` of `pool` inside `tx`: `true` if it was
    /// active. The slot is free once `tx` commits.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming `tx` or `pool` as for
    /// [`borrow_in`](SqliteStore::borrow_in); [`Error::Storage`] if SQLite
    /// failed, and `tx` is as it was.
    pub fn return_in(&self, tx: &Connection, pool: &Pool, lease: LeaseId) -> Result<bool> {
        self.check_tx(tx, pool)?;
        let now = self.time.now()?;
        sql::return_lease(tx, pool.id(), lease, now).map_err(storage("return"))
    }

    /// Renews `lease` of `pool` inside `tx` to expire `ttl` from now,
    /// keeping its position and token, as [`Pool::renew`] does; the renewal
    /// holds once `tx` commits.
    ///
    /// # Errors
    /// Those of [`Pool::renew`], and [`Error::InvalidArgument`] naming `tx`
    /// or `pool` as for [`borrow_in`](SqliteStore::borrow_in).
    pub fn renew_in(
        &self,
        tx: &Connection,
        pool: &Pool,
        lease: &Lease,
        ttl: Duration,
    ) -> Result<Lease> {
        self.check_tx(tx, pool)?;
        let ttl = pool.limits().clamp_ttl(ttl)?;
        if lease.pool != pool.id() {
            return Err(Error::LeaseNotFound {
                pool: pool.id(),
                lease: lease.id,
            });
        }
        let now = self.time.now()?;
        sql::renew(tx, pool.id(), lease.id, now, ttl)
            .map_err(storage("renew"))?
            .ok_or(Error::PoolNotFound { pool: pool.id() })?
            .ok_or_else(|| Error::not_renewed(lease, instant(now)))
    }

    /// `tx` is inside a transaction on this store's file, and `pool` is a
    /// handle on this store.
    fn check_tx(&self, tx: &Connection, pool: &Pool) -> Result<()> {
        let allowed = "a connection to the store's file inside a transaction or savepoint";
        if tx.is_autocommit() {
            return Err(Error::InvalidArgument {
                field: "tx",
                allowed: allowed.into(),
                got: "a connection outside any transaction".into(),
            });
        }
        if !tx.path().is_some_and(|p| self.files.db.names(p.as_ref())) {
            return Err(Error::InvalidArgument {
                field: "tx",
                allowed: allowed.into(),
                got: format!("a connection to {:?}", tx.path().unwrap_or("memory")),
            });
        }
        let store: *const dyn Store = std::sync::Arc::as_ptr(pool.store());
        if !std::ptr::addr_eq(store, self as *const Self) {
            return Err(Error::InvalidArgument {
                field: "pool",
                allowed: "a handle on this store".into(),
                got: format!("pool {} on another store", pool.id()),
            });
        }
        Ok(())
    }
}
