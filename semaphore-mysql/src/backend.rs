//! [`MysqlStore`]: one MySQL or MariaDB database shared by processes on
//! many machines.

use std::sync::Arc;
use std::time::Duration;

use mysql_async::{Opts, OptsBuilder, Pool as ConnectionPool, PoolConstraints, PoolOpts};
use semaphore_core::store::DecidingClock as Time;
use semaphore_core::store::{
    BorrowRequest, Changes, Parts, Store, TryBorrow, TryBorrowAll, WaiterId, async_trait,
};
use semaphore_core::{
    Error, Holder as LeaseHolder, Lease, LeaseId, PoolId, PoolState, Result, Session,
};

use crate::MysqlOptions;
use crate::error::storage;
use crate::link::{self, Background, Link};
use crate::primitives::Step;
use crate::schema::{self, Tables};
use crate::session::Beats;

mod retry;

/// How long `connect` waits for the store's session to open and its
/// link.
const LINK_WAIT: Duration = Duration::from_secs(2);

/// How long a pooled connection may idle before it is closed.
const IDLE_CONNECTION_TTL: Duration = Duration::from_secs(60);

/// What every connection runs first: times in UTC (so that
/// `UNIX_TIMESTAMP` of a time is exact), `READ COMMITTED` (each statement
/// sees what committed before it, so that a step that waited for a pool's
/// row sees the step it waited for), and a 5 s lock wait (a retryable
/// error rather than a 50 s stall behind a stuck transaction).
const INIT: [&str; 3] = [
    "SET time_zone = '+00:00'",
    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
    "SET SESSION innodb_lock_wait_timeout = 5",
];

/// A [`Store`] in one MySQL (8.0 or later) or MariaDB (10.6 or later)
/// database, shared by any number of processes on any number of machines
/// (rule "Stores"; the design of
/// `mysql-counting-semaphore.txt`).
///
/// - **One transaction per primitive**, InnoDB, `READ COMMITTED`: the
///   pool's row is locked first (`SELECT ... FOR UPDATE`), so that steps
///   on one pool serialize while steps on different pools run in parallel;
///   a multi-pool borrow locks its pools' rows in id order, so two never
///   deadlock. A borrow is one round trip: a call of the store's borrow
///   procedure (`PREFIX_borrow_6`, created with the tables, the one place
///   the borrow is written), in a transaction of its own; a multi-pool
///   borrow calls its step once per pool in one transaction. A return is
///   one call in autocommit; the other primitives are a few
///   statements in one transaction. A dropped future rolls its
///   transaction back.
/// - **The server's clock decides** (rule "Time"): `SYSDATE(3)`, read
///   after the lock, judges expiry and sets expiries. Clients whose clocks
///   disagree can neither over-issue nor take a live lease;
///   [`Store::clock`] is this process's view of the server's clock.
/// - **Wake-ups:** MySQL has no LISTEN/NOTIFY. A return in this process
///   wakes its waiters at once. A return in another process rings the
///   heads its freed slots are owed to, right after its delete commits:
///   each store keeps a connection of its own (its link) waiting, a second
///   at a time, for a named lock a second connection of its own holds,
///   and the return interrupts that wait (`KILL QUERY` of the connection
///   holding that store's named lock), so the head looks at once. What no ring tells (a ring that lands between two of the
///   link's statements, one the server refuses because the returner is
///   another MySQL user without `CONNECTION ADMIN`, a count raised, a
///   lease that expired) is seen at the next
///   [`poll_interval`](MysqlOptions::poll_interval) (100 ms by default),
///   when every waiting head looks again.
/// - **Fair across machines:** each process's head waiter is queued
///   in the waiters table, first come first served, each owed its weight;
///   a head not seen for 4.5 s (its process died) stops blocking others.
/// - **Sessions:** a bound lease (the default for guards) names the
///   store's session, a row whose end, on the server's clock, a connection
///   of the store's own heartbeats every third of the session timeout: a
///   blip or a killed connection ends nothing, a process killed outright
///   loses its bound leases at the session's end, and no lease is bound to
///   a session that has ended.
/// - **Killed waiters:** each queued place names the store's link, a
///   connection that keeps a named lock (`GET_LOCK`), which the server
///   frees when the connection ends however it ends; a place whose lock is
///   free holds back no one. No privilege is needed.
/// - **Tokens** are counted per pool, in the pool's row that each grant
///   locks anyway, so that grants on different pools share no row until
///   they commit; a delete keeps the pool's last token in the store's row,
///   which every later grant stays above (a pool id's tokens rise
///   across delete and register). Two pools may hand out the same token;
///   one multi-pool borrow's leases get rising tokens in its order.
///   (A store of an earlier schema version is migrated at connect, once
///   the processes of the earlier release are stopped.)
/// - **Errors:** I/O, lost connections, deadlocks (1213), lock wait
///   timeouts (1205) and the server shutting down are retryable
///   [`Error::Storage`]; a lost connection is never [`Error::Exhausted`].
///
/// Needs a tokio runtime. The user needs `CREATE` and `CREATE ROUTINE` on
/// the database the first time (the tables and the procedures are made if
/// missing), then `SELECT`, `INSERT`, `UPDATE`, `DELETE` and `EXECUTE`.
///
/// ```no_run
/// use std::{sync::Arc, time::Duration};
/// use semaphore_mysql::{MysqlStore, Pool, PoolId};
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), semaphore_mysql::Error> {
/// let store = Arc::new(MysqlStore::connect("mysql://app:secret@db:3306/app").await?);
/// let pool = Pool::new(store, PoolId::from_name("exports"));
/// pool.register(3).await?; // idempotent: every machine may call it
/// let lease = pool.borrow(Duration::from_secs(600), Duration::from_secs(30)).await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct MysqlStore {
    pool: ConnectionPool,
    tables: Tables,
    changes: Arc<Changes>,
    time: Time,
    link: Arc<Link>,
    /// The session this store's bound leases belong to.
    session: Session,
    /// The most connections the pool opens: how many stale ones a step
    /// may meet in a row.
    pool_size: usize,
    /// The process that connected it: a child forked from it is refused.
    process: semaphore_core::store::ForkCheck,
    _background: Background,
}

fn invalid_url(e: impl std::fmt::Display) -> Error {
    Error::InvalidArgument {
        field: "url",
        allowed: "a MySQL URL: mysql://user:password@host:port/database".into(),
        got: format!("one that does not parse: {e}"),
    }
}

impl MysqlStore {
    /// Connects to the database at `url` with [`MysqlOptions::default`].
    ///
    /// # Errors
    /// See [`connect_with`](MysqlStore::connect_with).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, MysqlOptions::default()).await
    }

    /// Connects to the database at `url`
    /// (`mysql://user:password@host:port/database`, or `?socket=PATH` for a
    /// unix socket; no TLS), through a pool of
    /// [`MysqlOptions::pool_size`] connections, creates the store's tables
    /// if missing, and starts the session's heartbeat, the link and the
    /// waiters' poll. It waits up to 2 s for the session and the link, so
    /// that the first borrow is bound and its place, if it queues, is
    /// linked.
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] naming `url`, `table_prefix`,
    ///   `pool_size` or `poll_interval`.
    /// - [`Error::NoRuntime`] outside a tokio runtime.
    /// - [`Error::SchemaMismatch`] if the tables hold another version.
    /// - [`Error::Storage`] if the server cannot be reached (retryable) or
    ///   refuses (not retryable).
    pub async fn connect_with(url: &str, options: MysqlOptions) -> Result<Self> {
        options.check()?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::NoRuntime {
                operation: "connect",
            });
        }
        let opts = Opts::from_url(url).map_err(invalid_url)?;
        let constraints =
            PoolConstraints::new(0, options.pool_size).ok_or_else(|| Error::InvalidArgument {
                field: "pool_size",
                allowed: "1 or more".into(),
                got: options.pool_size.to_string(),
            })?;
        let opts: Opts = OptsBuilder::from_opts(opts)
            .init(INIT.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .stmt_cache_size(64)
            .pool_opts(
                PoolOpts::default()
                    .with_constraints(constraints)
                    // Idle connections are kept (up to `pool_size`) for a
                    // minute: with mysql_async's default of none, each
                    // primitive opened a connection of its own (handshake,
                    // session settings, statement prepared anew).
                    .with_inactive_connection_ttl(IDLE_CONNECTION_TTL)
                    // No COM_RESET_CONNECTION when a connection goes back:
                    // it drops the prepared statements (a round trip more
                    // per primitive) and, on MySQL, the session settings
                    // above, which mysql_async does not set again. A
                    // transaction left open is still rolled back.
                    .with_reset_connection(false),
            )
            .into();
        let pool = ConnectionPool::new(opts.clone());
        let tables = Tables::new(&options.table_prefix);
        let mut conn = pool.get_conn().await.map_err(storage("open"))?;
        schema::prepare(&mut conn, &tables).await?;
        link::measure(&mut conn, &options.time).await;
        let changes = Arc::new(Changes::new());
        let link = Arc::new(Link::default());
        let session = Session::start(
            Arc::new(Beats {
                opts: opts.clone(),
                tables: tables.clone(),
                time: options.time.clone(),
                conn: tokio::sync::Mutex::new(None),
            }),
            semaphore_core::store::session_timeout(options.session_timeout, &options.time),
            options.time.clone(),
        );
        let background = link::spawn(
            opts,
            link.clone(),
            changes.clone(),
            options.time.clone(),
            (!options.rings_only).then_some(options.poll_interval),
        );
        let _ = tokio::time::timeout(LINK_WAIT, async {
            while link.id.lock().is_none() {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
        .await;
        // A store whose session is not open yet works: its bound borrows
        // retry until it is. One that cannot open one is refused.
        session.open_within(LINK_WAIT).await?;
        drop(conn);
        Ok(Self {
            pool,
            tables,
            changes,
            time: options.time,
            link,
            session,
            pool_size: options.pool_size,
            process: semaphore_core::store::ForkCheck::here(),
            _background: background,
        })
    }

    /// This process's view of the server's clock, which times its waits;
    /// `None` in test mode (a manual clock).
    pub fn server_clock(&self) -> Option<&crate::store::ServerClock> {
        self.time.server().map(|view| &**view)
    }

    /// The connection pool the store's steps run on.
    pub fn connection_pool(&self) -> &ConnectionPool {
        &self.pool
    }

    /// The uuid of the named lock, `semaphore_holder_<uuid>`, that this
    /// store's link keeps while it is up, and that marks its queued heads
    /// as alive; `None` while it is down. A new uuid after each reconnect.
    pub fn link_id(&self) -> Option<uuid::Uuid> {
        self.link.current()
    }

    /// `result`, after telling the session if the step found the session
    /// it named ended.
    fn told<T>(&self, session: Option<semaphore_core::SessionId>, result: Result<T>) -> Result<T> {
        if let (Err(Error::Storage { source, .. }), Some(id)) = (&result, session)
            && source.is::<crate::primitives::SessionEnded>()
        {
            self.session.ended_on_store(id);
        }
        result
    }

    fn step(&self) -> Step<'_> {
        let link = self.link.current();
        Step {
            t: &self.tables,
            time: &self.time,
            link,
        }
    }
}

impl MysqlStore {
    /// The number of queued heads of `pool`: store handles (normally one
    /// per process) whose borrowers wait on it, on every machine, as the
    /// waiters table records them.
    ///
    /// # Errors
    /// [`Error::Storage`] if the database failed.
    pub async fn queue_heads(&self, pool: PoolId) -> Result<u32> {
        self.in_tx("queue_heads", |step, tx| {
            Box::pin(step.queue_heads(tx, pool))
        })
        .await
    }
}

#[async_trait]
impl Store for MysqlStore {
    fn parts(&self) -> Parts<'_> {
        Parts {
            clock: self.time.clock(),
            changes: &self.changes,
            session: Some(&self.session),
            max_ttl: Duration::MAX,
            in_place: None,
        }
    }

    async fn register(&self, pool: PoolId, count: u32) -> Result<PoolState> {
        self.in_tx("register", |step, tx| {
            Box::pin(step.register(tx, pool, count))
        })
        .await
    }

    async fn inspect(&self, pool: PoolId) -> Result<PoolState> {
        self.in_tx("inspect", |step, tx| Box::pin(step.inspect(tx, pool)))
            .await?
            .ok_or(Error::PoolNotFound { pool })
    }

    async fn set_draining(&self, pool: PoolId, draining: bool) -> Result<PoolState> {
        self.in_tx("set_draining", |step, tx| {
            Box::pin(step.set_draining(tx, pool, draining))
        })
        .await?
        .ok_or(Error::PoolNotFound { pool })
    }

    async fn delete(&self, pool: PoolId) -> Result<bool> {
        self.in_tx("delete", |step, tx| Box::pin(step.delete(tx, pool)))
            .await
    }

    async fn try_borrow(&self, request: &BorrowRequest) -> Result<TryBorrow> {
        let result = self
            .autocommit("borrow", |step, conn| {
                Box::pin(step.call_borrow(conn, request))
            })
            .await
            .and_then(|answer| answer);
        self.told(request.session, result)
    }

    async fn try_borrow_all(&self, requests: &[BorrowRequest]) -> Result<TryBorrowAll> {
        let result = self
            .in_tx("borrow_all", |step, tx| {
                Box::pin(step.try_borrow_all(tx, requests))
            })
            .await
            .and_then(|answer| answer);
        self.told(requests.first().and_then(|r| r.session), result)
    }

    async fn return_lease(&self, pool: PoolId, lease: LeaseId) -> Result<bool> {
        let returned = self
            .autocommit("return", |step, conn| {
                Box::pin(step.return_lease(conn, pool, lease))
            })
            .await?;
        if returned {
            self.changes.notify(pool);
        }
        Ok(returned)
    }

    async fn renew(&self, pool: PoolId, lease: LeaseId, ttl: Duration) -> Result<Option<Lease>> {
        self.in_tx("renew", |step, tx| {
            Box::pin(step.renew(tx, pool, lease, ttl))
        })
        .await?
        .ok_or(Error::PoolNotFound { pool })
    }

    async fn unbind(&self, pool: PoolId, lease: LeaseId) -> Result<bool> {
        self.autocommit("unbind", |step, conn| {
            Box::pin(step.unbind(conn, pool, lease))
        })
        .await
    }

    async fn holders(&self, pool: PoolId) -> Result<Vec<LeaseHolder>> {
        let listed = self
            .in_tx("holders", |step, tx| Box::pin(step.holders(tx, pool)))
            .await?
            .ok_or(Error::PoolNotFound { pool })?;
        // The admin listing shows no binding (as every store's).
        Ok(listed
            .into_iter()
            .map(|h| LeaseHolder::new(h.lease.with_session(None), h.owner, h.key))
            .collect())
    }

    async fn force_return(&self, pool: PoolId, position: u32) -> Result<Option<LeaseHolder>> {
        self.in_tx("force_return", |step, tx| {
            Box::pin(step.force_return(tx, pool, position))
        })
        .await?
        .ok_or(Error::PoolNotFound { pool })
    }

    async fn place(&self, pool: PoolId, waiter: WaiterId) -> Result<Option<u64>> {
        let waiter = waiter.as_uuid().as_bytes().to_vec();
        self.in_tx("place", |step, tx| Box::pin(step.place(tx, pool, &waiter)))
            .await
    }

    async fn leave_queue(&self, pool: PoolId, waiter: WaiterId) -> Result<()> {
        let waiter = waiter.as_uuid().as_bytes().to_vec();
        self.in_tx("leave_queue", |step, tx| {
            Box::pin(step.leave_queue(tx, pool, &waiter))
        })
        .await?;
        Ok(())
    }

    async fn pools(&self, after: Option<PoolId>, limit: u32) -> Result<Vec<PoolState>> {
        let Some(start) = semaphore_core::store::page_start(after) else {
            return Ok(Vec::new());
        };
        self.in_tx("pools", |step, tx| Box::pin(step.pools(tx, start, limit)))
            .await
    }

    async fn queue(&self, pool: PoolId) -> Result<Vec<semaphore_core::QueuedPlace>> {
        self.in_tx("queue", |step, tx| Box::pin(step.queue(tx, pool)))
            .await
    }
}
