//! [`PostgresStore`]: one PostgreSQL database shared by processes on many
//! machines.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use deadpool_postgres::{Manager, ManagerConfig, Pool as ConnectionPool, RecyclingMethod};
use semaphore_core::store::{Changes, ForkCheck};
use semaphore_core::{Error, LeaseId, PoolId, Result, Session};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Config, NoTls, Row};

use crate::error::{pool as pool_error, storage};
use crate::listen::{self, Listener};
use crate::primitives::first;
use crate::returning::Returning;
use crate::session::Beats;
use crate::sql::Sql;
use crate::{PostgresOptions, schema};
use semaphore_core::store::DecidingClock as Time;

/// How long `connect` waits for the store's session to open, which holds
/// its bound leases.
const SESSION_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// A [`Store`](semaphore_core::store::Store) in one PostgreSQL database, shared by any number of
/// processes on any number of machines (rule "Stores").
///
/// - **One round trip per primitive.** Each is one statement in autocommit
///   calling a server-side function. No transaction is ever held open
///   across an `.await`, so a dropped future never strands one on a pooled
///   connection.
/// - **A row per slot** (schema version 4): an unkeyed one-slot
///   borrow with nobody queued ahead takes the lowest free slot row with
///   `FOR UPDATE SKIP LOCKED`, and a return frees only its rows; neither
///   locks the pool row, so grants on different slots commit in parallel.
///   Keyed and weighted borrows, queue places and the leases of gone
///   holders take the pool row's lock.
/// - **The common path** (version 7): while nobody is queued, a
///   one-slot borrow's first attempt and a return each run one statement
///   inside their function, write only the slot's row, and notify
///   nobody: a pair is two transactions.
/// - **The server's clock decides** (rule "Time"): `clock_timestamp()`,
///   read in the deciding call, judges expiry and sets `expires_at`. Clients whose
///   clocks disagree by any amount can neither over-issue nor take a live
///   lease. [`Store::clock`](semaphore_core::store::Store::clock) is this process's view of the server's clock,
///   its own plus an offset measured at connect and refreshed.
/// - **Hand-off:** a return on a pool with a queued head grants
///   the freed slot to that head in the return's own commit, so that one
///   commit serves both. This process's queued borrowers get their leases
///   delivered in memory, in queue order: every return in flight claims
///   one from the core's queue (naming a borrower that is not looking),
///   so that the returns of a busy pool hand their slots on in parallel,
///   not one look of the head at a time. A return
///   while a borrower of this process waits on the pool (claiming or
///   not) runs on a task of its own, so the lease is delivered, or the
///   slot freed and told of, even if the caller drops `release`. Another
///   process's head, first in `semaphore_waiters` and asking for one
///   unkeyed slot, gets the slot marked `granted_to` it, and the
///   notification carries the lease: a bound borrower holds it on arrival
///   (its session vouching for at most 1 s until its store confirms it,
///   [`Limits::handed_bound`](semaphore_core::Limits::handed_bound)), an
///   unbound one takes it at its next look. If it leaves first, it frees
///   that slot; if its process died, the slot frees itself within 1 s. Any other
///   head (weighted, keyed, gone, or looking at that instant) is woken
///   instead.
/// - **Wake-up:** one `LISTEN` connection per store; the functions that can
///   let a waiter in notify at commit. After a listener reconnect every
///   head re-checks, and a fallback poll covers the rest. A return whose
///   slot went to this process's head sends none; any other return that
///   may let a head in sends its wake-up after its own answer, on the same
///   connection (PgBouncer in transaction mode may mix up pipelined
///   transactions).
/// - **Fair across machines:** the heads of each process's queue are
///   queued in `semaphore_waiters`; a head whose process died (its
///   listener's backend gone from `pg_stat_activity`, or no heartbeat for
///   4.5 s) stops blocking others.
/// - **Tokens** come from a sequence that survives delete, and never
///   repeat, even for a grant rolled back. A grant takes its token
///   under its slot row's lock, so each position's tokens rise with its
///   grants; two grants in flight at once on different positions may
///   commit in either order.
/// - **Errors:** SQLSTATE 40001, 40P01, 55P03, 57014, class 08, a closed
///   connection and a pool timeout are retryable [`Error::Storage`]; a lost
///   connection is never [`Error::Exhausted`].
///
/// Needs a tokio runtime: the driver and the listener run on it. A call
/// made outside one fails with [`Error::NoRuntime`]; a guard dropped
/// outside one is still returned, on the library's own runtime.
///
/// ```no_run
/// use std::{sync::Arc, time::Duration};
/// use semaphore_postgres::{Pool, PoolId, PostgresStore};
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), semaphore_postgres::Error> {
/// let store = Arc::new(PostgresStore::connect("postgresql://app@db/app").await?);
/// let pool = Pool::new(store, PoolId::from_name("exports"));
/// pool.register(3).await?; // idempotent: every machine may call it
/// let lease = pool.borrow(Duration::from_secs(600), Duration::from_secs(30)).await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct PostgresStore {
    pub(crate) pool: ConnectionPool,
    pub(crate) schema: String,
    pub(crate) sql: Arc<Sql>,
    pub(crate) changes: Arc<Changes>,
    pub(crate) time: Time,
    pub(crate) listener: Listener,
    pub(crate) session: Session,
    /// The process that connected it: a child forked from it is refused.
    pub(crate) process: ForkCheck,
}

/// A pooled connection that leaves the pool for good (and closes) if the
/// call using it is dropped before it finishes, as a call given up on a
/// connection gone silent is (a half-open connection, a stalled flow):
/// the next call gets another instead of queueing behind the stuck one.
struct Leased(Option<deadpool_postgres::Object>);

impl Leased {
    fn client(&self) -> &deadpool_postgres::Object {
        self.0
            .as_ref()
            .expect("a leased connection until it goes back")
    }

    /// The call finished: the connection goes back to the pool.
    fn back(mut self) {
        drop(self.0.take());
    }
}

impl Drop for Leased {
    fn drop(&mut self) {
        if let Some(object) = self.0.take() {
            drop(deadpool_postgres::Object::take(object));
        }
    }
}

/// `config` with the socket options that make a connection to a peer gone
/// silent (a half-open connection: a dropped NAT or firewall entry, a
/// partition) fail rather than hang, unless the connection string set
/// them: a connect gives up after 5 s, data not acknowledged within 10 s
/// (`tcp_user_timeout`, Linux) and an idle connection whose keep-alive
/// probes go unanswered for about 11 s fail the connection, so that a
/// renewal or a heartbeat stuck on it is tried again on another.
fn dead_peers_fail(mut config: Config) -> Config {
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(std::time::Duration::from_secs(5));
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(std::time::Duration::from_secs(10));
    }
    config
        .keepalives(true)
        .keepalives_idle(std::time::Duration::from_secs(5))
        .keepalives_interval(std::time::Duration::from_secs(2))
        .keepalives_retries(3);
    config
}

fn invalid_url(field: &'static str, e: impl std::fmt::Display) -> Error {
    Error::InvalidArgument {
        field,
        allowed: "a PostgreSQL connection string (URL or key=value form)".into(),
        got: format!("one that does not parse: {e}"),
    }
}

impl PostgresStore {
    /// Connects to the database at `url` with [`PostgresOptions::default`].
    ///
    /// # Errors
    /// See [`connect_with`](PostgresStore::connect_with).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, PostgresOptions::default()).await
    }

    /// Connects to the database at `url` (a URL or a key=value connection
    /// string, without TLS) through a deadpool-postgres pool of
    /// [`PostgresOptions::pool_size`] connections, checks or creates the
    /// store's tables, and starts the listener. It waits up to 2 s for the
    /// listener's session, which holds the store's bound leases, so
    /// that the first borrow is bound; a listener that is not up by then
    /// (its leases are then left to their ttl until it is) fails nothing.
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] naming `url`, `listen_url`, `schema`,
    ///   `pool_size` or `poll_interval`.
    /// - [`Error::Storage`], retryable, if no connection could be had
    ///   within [`PostgresOptions::pool_timeout`].
    /// - [`Error::NoRuntime`] outside a tokio runtime.
    /// - [`Error::SchemaMismatch`] if the schema holds `semaphore_` tables
    ///   of another shape or version; nothing is changed.
    /// - [`Error::Storage`] if the server cannot be reached (retryable) or
    ///   refuses (not retryable).
    pub async fn connect_with(url: &str, options: PostgresOptions) -> Result<Self> {
        options.check()?;
        let config = dead_peers_fail(url.parse().map_err(|e| invalid_url("url", e))?);
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = ConnectionPool::builder(manager)
            .max_size(options.pool_size)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(options.pool_timeout))
            .create_timeout(Some(options.pool_timeout))
            .build()
            .map_err(|e| Error::InvalidArgument {
                field: "pool_size",
                allowed: "a pool deadpool can build".into(),
                got: e.to_string(),
            })?;
        let listen = match &options.listen_url {
            Some(url) => dead_peers_fail(url.parse().map_err(|e| invalid_url("listen_url", e))?),
            None => config,
        };
        Self::from_pool(pool, listen, options).await
    }

    /// A store on a deadpool-postgres pool the application already has, its
    /// statements on `pool` (which may go through PgBouncer in transaction
    /// mode) and its listener on a connection of its own made from
    /// `listen`, which must reach the server directly. Checks or creates
    /// the tables and starts the listener.
    ///
    /// # Errors
    /// As [`connect_with`](PostgresStore::connect_with).
    pub async fn from_pool(
        pool: ConnectionPool,
        listen: Config,
        options: PostgresOptions,
    ) -> Result<Self> {
        options.check()?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::NoRuntime {
                operation: "connect",
            });
        }
        let client = pool.get().await.map_err(pool_error("open"))?;
        schema::prepare(&client, &options.schema, options.migrate).await?;
        if let Time::Server(view) = &options.time {
            listen::measure(&client, view)
                .await
                .ok_or_else(|| Error::Storage {
                    operation: "open",
                    retryable: true,
                    source: "reading the server's clock failed".into(),
                })?;
        }
        drop(client);
        let changes = Arc::new(Changes::new());
        let sql = Arc::new(Sql::new(&options.schema, options.prepared_statements));
        let session = Session::start(
            Arc::new(Beats {
                config: listen.clone(),
                sql: sql.clone(),
                time: options.time.clone(),
                client: tokio::sync::Mutex::new(None),
            }),
            semaphore_core::store::session_timeout(options.session_timeout, &options.time),
            options.time.clone(),
        );
        let listener = listen::spawn(listen::Setup {
            config: listen,
            channel: schema::channel(&options.schema),
            changes: changes.clone(),
            ends: session.ends(),
            poll: options.poll_interval,
            time: options.time.clone(),
            arrivals: crate::arrival::Arrivals::new(&pool, &sql, &options.time),
        });
        let store = Self {
            pool,
            sql,
            schema: options.schema,
            changes,
            time: options.time,
            listener,
            session,
            process: ForkCheck::here(),
        };
        // A store whose session is not open yet (the server is slow) works:
        // its bound leases are left to their ttl until it is. The listener
        // too: until it is up, this process's places in the queue name no
        // backend, and outlive a crash by the waiters' ttl.
        let _ = tokio::time::timeout(SESSION_WAIT, async {
            while store.backend().is_none() {
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
        })
        .await;
        store.session.open_within(SESSION_WAIT).await?;
        Ok(store)
    }

    /// Makes the store's tables and functions in `options`' schema, or
    /// migrates them to this version, and returns: the step a deployment
    /// runs once, as a role that may create in the schema, before its
    /// processes connect as a runtime role with
    /// [`PostgresOptions::migrate`]`(false)` (the README lists the grants
    /// that role needs). Idempotent: a schema already at this version is
    /// left as it is. Only `schema` among the options matters.
    ///
    /// ```no_run
    /// use semaphore_postgres::{PostgresOptions, PostgresStore};
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), semaphore_postgres::Error> {
    /// // As the owner, once per release:
    /// PostgresStore::migrate("postgresql://owner@db/app", PostgresOptions::default()).await?;
    /// // As the application's role, in every process:
    /// let options = PostgresOptions::default().migrate(false);
    /// let store = PostgresStore::connect_with("postgresql://app@db/app", options).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] naming `url` or `schema`.
    /// - [`Error::SchemaMismatch`] if the schema holds `semaphore_` tables
    ///   of another shape, or of a newer version; nothing is changed.
    /// - [`Error::Storage`] if the server cannot be reached (retryable) or
    ///   refuses (not retryable: a role that may not create there).
    pub async fn migrate(url: &str, options: PostgresOptions) -> Result<()> {
        schema::check_name(&options.schema)?;
        let config: Config = url.parse().map_err(|e| invalid_url("url", e))?;
        let (client, connection) = config.connect(NoTls).await.map_err(storage("migrate"))?;
        let driver = tokio::spawn(connection);
        let prepared = schema::prepare(&client, &options.schema, true).await;
        drop(client);
        let _ = driver.await;
        prepared
    }

    /// The statements that grant role `role` what a store of this version
    /// needs at run time on schema `schema`, and no more: `USAGE` on the
    /// schema, `SELECT`, `INSERT`, `UPDATE` and `DELETE` on its tables,
    /// `USAGE` and `SELECT` on its sequences, `EXECUTE` on its functions.
    /// Run them as the owner after [`migrate`](PostgresStore::migrate)
    /// (again after each migration that adds a table or function).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming `schema`, or `role` if it is not
    /// 1 to 63 of `a-z`, `0-9`, `_` (quote-free, so that the statements
    /// are safe to run as they are).
    pub fn grants(schema: &str, role: &str) -> Result<String> {
        schema::check_name(schema)?;
        let plain = !role.is_empty()
            && role.len() <= 63
            && role
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !plain {
            return Err(Error::InvalidArgument {
                field: "role",
                allowed: "1 to 63 of a-z, 0-9 and _".into(),
                got: format!("{:?}", role.chars().take(64).collect::<String>()),
            });
        }
        Ok(format!(
            "GRANT USAGE ON SCHEMA \"{schema}\" TO {role};\n\
             GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA \"{schema}\" TO {role};\n\
             GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA \"{schema}\" TO {role};\n\
             GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA \"{schema}\" TO {role};\n"
        ))
    }

    /// The schema the store's tables are in.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// This process's view of the server's clock, which times its waits;
    /// `None` in test mode (a manual clock).
    pub fn server_clock(&self) -> Option<&crate::store::ServerClock> {
        match &self.time {
            Time::Server(view) => Some(view),
            Time::Manual(_) => None,
        }
    }

    /// The process id of the listener's backend on the server, while it is
    /// connected: what other processes look for in `pg_stat_activity` to
    /// tell that this process's queued heads are alive.
    pub fn listener_backend(&self) -> Option<i32> {
        self.backend()
    }

    /// The connection pool the store's statements run on.
    pub fn connection_pool(&self) -> &ConnectionPool {
        &self.pool
    }

    /// The number of queued heads of `pool`: store handles (normally one
    /// per process) whose borrowers wait on it, on every machine, as the
    /// table records them.
    ///
    /// # Errors
    /// [`Error::Storage`] if the database failed.
    pub async fn queue_heads(&self, pool: PoolId) -> Result<u32> {
        let now = self.now_param();
        let rows = self
            .query(
                "queue_heads",
                &self.sql.queue_heads,
                &[(&pool.as_uuid(), Type::UUID), (&now, Type::INT8)],
            )
            .await?;
        let n: i64 = first(&rows, "queue_heads")?
            .try_get(0)
            .map_err(storage("queue_heads"))?;
        Ok(u32::try_from(n).unwrap_or(u32::MAX))
    }

    /// Runs one statement on a pooled connection: one round trip.
    pub(crate) async fn query(
        &self,
        operation: &'static str,
        statement: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>> {
        self.process.check(operation)?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::NoRuntime { operation });
        }
        semaphore_core::store::bounded(operation, async {
            let client = Leased(Some(self.pool.get().await.map_err(pool_error(operation))?));
            let rows = crate::sql::run(client.client(), self.sql.prepared, statement, params)
                .await
                .map_err(storage(operation));
            client.back();
            rows
        })
        .await
    }

    /// Returns `lease` of `pool`, handing its slot on where it can
    /// ([`Returning::run`]). A return while a borrower of this process
    /// waits on the pool runs in a task of its own, so that a grant it
    /// commits reaches the head (or is returned), and the slot it frees is
    /// told of, even if this call is dropped.
    pub(crate) async fn return_then_wake(&self, pool: PoolId, lease: LeaseId) -> Result<bool> {
        self.process.check("return")?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::NoRuntime {
                operation: "return",
            });
        }
        self.session.returning(lease); // held on arrival, maybe unconfirmed
        let returning = Returning {
            connections: self.pool.clone(),
            sql: self.sql.clone(),
            changes: self.changes.clone(),
            now: self.now_param(),
            session: self.session.current(),
        };
        // Bounded as every call. A return that a borrower of this process
        // waits for goes on in its task if this call gives up waiting for
        // it or is dropped: one that claimed the head, and one that could
        // not (the head was looking at that instant), or the head would
        // wait for the lease's ttl.
        semaphore_core::store::bounded("return", async {
            let claim = self.changes.claim_head(pool);
            if claim.is_none() && self.changes.waiting(pool) == 0 {
                return returning.run(pool, lease, None).await;
            }
            tokio::spawn(returning.run(pool, lease, claim))
                .await
                .map_err(crate::returning::lost)?
        })
        .await
    }

    pub(crate) fn statements(&self) -> &Sql {
        &self.sql
    }

    /// The test's now, unix ms, for a statement's `p_now`; `None` outside
    /// test mode (the server reads its own clock).
    pub(crate) fn now_param(&self) -> Option<i64> {
        self.time.now_param().map(|ms| ms as i64)
    }

    pub(crate) fn backend(&self) -> Option<i32> {
        match self.listener.backend.load(Ordering::Relaxed) {
            0 => None,
            pid => Some(pid),
        }
    }
}
