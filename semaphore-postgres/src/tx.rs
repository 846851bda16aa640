//! Leases inside a transaction the application owns (rule "Beyond the basic
//! model": the lease and the application's own write commit or roll back
//! together).

use std::time::Duration;

use semaphore_core::store::{Store, millis};
use semaphore_core::{BorrowOptions, Error, Lease, LeaseId, Pool, Result, SessionId};
use tokio_postgres::Transaction;
use tokio_postgres::types::{ToSql, Type};

use crate::PostgresStore;
use crate::error::storage;
use crate::primitives::first;

use crate::sql::{self, Attempt};

/// # Caller-owned transactions
///
/// `borrow_in` and `return_in` run the store's functions on a
/// [`Transaction`] the application opened on the same database, so that a
/// lease and the application's own writes commit or roll back together.
/// They never commit or roll back; each is one round trip.
///
/// - The transaction holds what the call locked until it ends: the slot
///   rows it took or freed and, for a keyed or weighted borrow (or one
///   behind heads queued by other processes), the pool's row. Keep it
///   short: other borrowers of the pool skip those rows, or wait for the
///   pool's row.
/// - No waiting: a borrow either gets a free slot at once or fails with
///   [`Error::Exhausted`]. It does not jump borrowers queued in this process
///   or heads queued by other processes.
/// - A rolled-back borrow leaves no lease; its token came from a sequence
///   and is never handed out again.
/// - Waiters everywhere learn of a committed return through the store's
///   notification, sent at commit.
///
/// ```no_run
/// use std::{sync::Arc, time::Duration};
/// use semaphore_postgres::{BorrowOptions, Pool, PoolId, PostgresStore};
///
/// # async fn demo(mut client: semaphore_postgres::tokio_postgres::Client) -> Result<(), Box<dyn std::error::Error>> {
/// let store = Arc::new(PostgresStore::connect("postgresql://app@db/app").await?);
/// let pool = Pool::new(store.clone(), PoolId::from_name("exports"));
/// let tx = client.transaction().await?;
/// let lease = store.borrow_in(&tx, &pool, Duration::from_secs(600), BorrowOptions::new()).await?;
/// tx.execute("INSERT INTO jobs (slot, token) VALUES ($1, $2)",
///     &[&i64::from(lease.position), &(lease.token as i64)]).await?;
/// tx.commit().await?; // the lease and the row exist together, or neither does
/// # Ok(()) }
/// ```
impl PostgresStore {
    /// Borrows the lowest free slot of `pool` for `ttl` inside `tx`, without
    /// waiting. The lease exists once `tx` commits. `ttl`, the key
    /// and the owner label are checked and clamped as by
    /// [`Pool::borrow_with`], against `pool`'s limits; with a key whose
    /// lease is active, that lease is returned.
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] naming `pool` if the handle is on
    ///   another store, or `ttl`, `key`, `owner` as for a borrow.
    /// - [`Error::PoolNotFound`], [`Error::Exhausted`] (waited zero).
    /// - [`Error::Storage`] if the database failed; PostgreSQL then fails
    ///   the rest of `tx` too, as it does for any error in a transaction.
    pub async fn borrow_in(
        &self,
        tx: &Transaction<'_>,
        pool: &Pool,
        ttl: Duration,
        options: BorrowOptions,
    ) -> Result<Lease> {
        self.check_pool(pool)?;
        let ttl = pool.limits().clamp_ttl(ttl)?;
        options.validate(pool.limits())?;
        let exhausted = Error::Exhausted {
            pool: pool.id(),
            waited: Duration::ZERO,
        };
        if pool.waiting().count > 0 && options.key.is_none() {
            return Err(exhausted);
        }
        let key = options
            .key
            .as_deref()
            .map(|key| semaphore_core::store::stored_key(key, options.request_digest));
        let args = sql::TryBorrowArgs {
            pool: *pool.id().as_uuid(),
            lease: *LeaseId::new().as_uuid(),
            ttl: millis(ttl),
            waiter: None,
            key: key.as_deref(),
            owner: options.owner.as_deref(),
            now: self.now_param(),
            backend: self.listener_backend(),
            keep_place: false,
            slots: i64::from(options.slots),
            session: options
                .bound
                .then(|| self.session.current().map(|s| *s.as_uuid()))
                .flatten(),
            hold: None,
            retried: false,
        };
        let rows = tx
            .query_typed(&self.statements().try_borrow, &args.typed())
            .await
            .map_err(storage("borrow"))?;
        let row = first(&rows, "borrow")?;
        match sql::attempt(row, pool.id()).map_err(storage("borrow"))? {
            Attempt::Granted(lease) => Ok(lease),
            Attempt::Exhausted(_) => Err(exhausted),
            Attempt::Missing(_) => Err(Error::PoolNotFound { pool: pool.id() }),
            Attempt::Draining => Err(Error::Draining { pool: pool.id() }),
            Attempt::KeyReused => Err(Error::KeyReused { pool: pool.id() }),
            Attempt::SessionEnded => Err(self
                .session
                .ended_error(args.session.map(SessionId::from_uuid))),
        }
    }

    /// Returns lease `lease` of `pool` inside `tx`: `true` if it was
    /// active. The slot is free once `tx` commits.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming `pool` as for
    /// [`borrow_in`](PostgresStore::borrow_in); [`Error::Storage`] if the
    /// database failed.
    pub async fn return_in(
        &self,
        tx: &Transaction<'_>,
        pool: &Pool,
        lease: LeaseId,
    ) -> Result<bool> {
        self.check_pool(pool)?;
        self.session.returning(lease);
        let (now, id) = (self.now_param(), pool.id());
        // Only another process's queued head may be handed the slot here:
        // this process's would learn of its lease before `tx` commits.
        let args = crate::sql::ReturnArgs::new(
            id,
            lease,
            now,
            self.changes().hand_offs_allowed(),
            None,
            None,
        );
        let params = args.typed();
        let rows = tx
            .query_typed(&self.statements().return_lease, &params)
            .await
            .map_err(storage("return"))?;
        let answer = crate::returning::returned(&rows)?;
        // The wake-up (a notification if a head is queued or was handed
        // the slot) is sent at `tx`'s commit.
        let wake: [(&(dyn ToSql + Sync), Type); 3] = [
            (id.as_uuid(), Type::UUID),
            (&answer.handed, Type::BOOL),
            (&answer.handed_lease, Type::UUID),
        ];
        tx.query_typed(&self.statements().wake, &wake)
            .await
            .map_err(storage("return"))?;
        Ok(answer.returned)
    }

    /// `pool` is a handle on this store.
    fn check_pool(&self, pool: &Pool) -> Result<()> {
        let store: *const dyn Store = std::sync::Arc::as_ptr(pool.store());
        if std::ptr::addr_eq(store, self as *const Self) {
            return Ok(());
        }
        Err(Error::InvalidArgument {
            field: "pool",
            allowed: "a handle on this store".into(),
            got: format!("pool {} on another store", pool.id()),
        })
    }
}
