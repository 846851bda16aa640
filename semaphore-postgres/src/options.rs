//! [`PostgresOptions`]: how [`PostgresStore`](crate::PostgresStore)
//! connects and where it keeps its tables.

use std::time::Duration;

use semaphore_core::Result;
use semaphore_core::store::{DecidingClock as Time, check_poll_interval, check_pool_size};

/// Options for [`PostgresStore::connect_with`](crate::PostgresStore::connect_with).
///
/// ```
/// use std::time::Duration;
/// use semaphore_postgres::PostgresOptions;
///
/// let options = PostgresOptions::default()
///     .schema("limits")
///     .pool_size(8)
///     .listen_url("postgresql://app@db-primary/app");
/// ```
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    pub(crate) session_timeout: Option<Duration>,
    pub(crate) schema: String,
    pub(crate) pool_size: usize,
    pub(crate) pool_timeout: Duration,
    pub(crate) poll_interval: Duration,
    pub(crate) listen_url: Option<String>,
    pub(crate) prepared_statements: bool,
    pub(crate) migrate: bool,
    pub(crate) time: Time,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self {
            session_timeout: None,
            schema: "public".into(),
            pool_size: 16,
            pool_timeout: Duration::from_secs(5),
            poll_interval: Duration::from_secs(1),
            listen_url: None,
            prepared_statements: false,
            migrate: true,
            time: Time::default(),
        }
    }
}

impl PostgresOptions {
    /// The schema that holds the store's tables (all named `semaphore_*`)
    /// and functions; created if missing. Default `public`. 1 to 40 of
    /// `a-z`, `0-9`, `_`, not starting with a digit; anything else is
    /// refused at connect with [`Error::InvalidArgument`](semaphore_core::Error::InvalidArgument) naming `schema`.
    /// Stores in different schemas share nothing, not even tokens.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// The most connections the store's pool opens for its statements
    /// (deadpool-postgres). Default 16. The listener takes one more.
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size;
        self
    }

    /// How long a call waits for a free connection of the pool, or for a
    /// new one to connect, before it fails with a retryable
    /// [`Error::Storage`](semaphore_core::Error::Storage). Default 5 s. A borrow's own `wait` is separate:
    /// it is spent between calls, never holding a connection.
    pub fn pool_timeout(mut self, timeout: Duration) -> Self {
        self.pool_timeout = timeout;
        self
    }

    /// How often waiters re-check the tables when no notification arrives:
    /// the fallback for lost notifications, and the heartbeat of a waiting
    /// process's place in the cross-machine queue. Default 1 s; allowed
    /// [`MIN_POLL_INTERVAL`](semaphore_core::store::MIN_POLL_INTERVAL) to
    /// [`MAX_POLL_INTERVAL`](semaphore_core::store::MAX_POLL_INTERVAL), else refused at
    /// connect naming `poll_interval`.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// Whether each connection prepares the store's statements once and
    /// runs them by name (`true`), rather than sending each as an unnamed
    /// statement that the server parses and plans at every call (`false`,
    /// the default). Prepared, a hot pool's borrow and return cost the
    /// server less: pgbench's pair of the two functions ran 13-17% more
    /// pairs per second prepared (BENCHMARKS.md, line 13).
    ///
    /// Leave it off behind PgBouncer in transaction mode before 1.21 (or
    /// with `max_prepared_statements = 0`), which may run a statement
    /// prepared on one server connection on another: it would be missing
    /// there, or be another client's statement of the same name.
    ///
    /// Statements run in a caller's own transaction
    /// ([`PostgresStore::borrow_in`](crate::PostgresStore::borrow_in),
    /// `return_in`), the listener's and the schema's stay unnamed.
    pub fn prepared_statements(mut self, prepared: bool) -> Self {
        self.prepared_statements = prepared;
        self
    }

    /// Whether `connect` makes the store's tables and functions when the
    /// schema has none, and migrates them when they are of an older
    /// version (`true`, the default: the connecting role then needs
    /// `CREATE` on the database or schema). With `false`, `connect` only
    /// checks them and writes no DDL: a runtime role needs nothing but
    /// `USAGE` on the schema, DML on its tables, `USAGE` on its sequences
    /// and `EXECUTE` on its functions (the README lists the grants), and a
    /// schema that is missing or older is refused with
    /// [`Error::SchemaMismatch`](semaphore_core::Error::SchemaMismatch)
    /// that says to migrate it first, with [`PostgresStore::migrate`](crate::PostgresStore::migrate)
    /// or `semaphore migrate`, as a role that may.
    pub fn migrate(mut self, migrate: bool) -> Self {
        self.migrate = migrate;
        self
    }

    /// A separate connection string for the listener, which must reach the
    /// server directly (`LISTEN` does not work through PgBouncer in
    /// transaction mode, which the statements do). Default: the store's own.
    pub fn listen_url(mut self, url: impl Into<String>) -> Self {
        self.listen_url = Some(url.into());
        self
    }

    pub(crate) fn check(&self) -> Result<()> {
        semaphore_core::store::check_session_timeout(self.session_timeout)?;
        crate::schema::check_name(&self.schema)?;
        check_poll_interval(self.poll_interval)?;
        check_pool_size(self.pool_size)
    }
}

semaphore_core::networked_store_options!(PostgresOptions, "statement", "schema");
