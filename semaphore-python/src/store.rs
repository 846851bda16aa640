//! The stores: a base class `Store` whose `pool()` makes pool handles,
//! and one subclass per store crate, each opened or connected by its
//! constructor.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::prelude::*;

use crate::pool::Pool;
use crate::runtime::{Signals, runtime, wait};
use crate::semaphore::{self, PoolId, store::Store as StoreTrait};
use crate::time::maybe_seconds;

/// Where the pools live: shared by every `Pool` made from it.
///
/// Not made directly: use `MemoryStore`, `SqliteStore`, `PostgresStore`,
/// `RedisStore` or `MysqlStore`. A store handle is also its process's
/// session: leases borrowed through it are bound to it, and on
/// PostgreSQL, Redis and MySQL they end within the session timeout if
/// this process dies. Keep one store per database for the life of the
/// process, and make it after any `os.fork()` (the module's threads do not
/// survive a fork).
#[pyclass(module = "semaphore_pool", subclass, frozen)]
pub(crate) struct Store {
    pub(crate) store: Arc<dyn StoreTrait>,
    /// Whether its calls answer without I/O (memory): polled once with the
    /// GIL held before anything else.
    pub(crate) inline: bool,
    kind: &'static str,
}

impl Store {
    fn new(
        store: Arc<dyn StoreTrait>,
        inline: bool,
        kind: &'static str,
    ) -> PyClassInitializer<Self> {
        PyClassInitializer::from(Self {
            store,
            inline,
            kind,
        })
    }
}

#[pymethods]
impl Store {
    /// A handle on the pool named `name`, or with the UUID `id`: the same
    /// pool as `PoolId::from_name(name)` (or the UUID) in Rust, so every
    /// process and language that names it shares it. Makes no call to the
    /// store; `register` creates the pool.
    ///
    /// Raises `InvalidArgument` naming `name` unless exactly one of `name`
    /// and `id` is given, or naming `id` for a string that is not a UUID.
    #[pyo3(signature = (name = None, *, id = None))]
    fn pool(&self, py: Python<'_>, name: Option<String>, id: Option<String>) -> PyResult<Pool> {
        let invalid = |field, got: String| {
            crate::errors::invalid(py, field, "exactly one of a name or a UUID id", got)
        };
        let pool_id = match (&name, &id) {
            (Some(name), None) => PoolId::from_name(name),
            (None, Some(id)) => id.parse().map_err(|_| {
                crate::errors::invalid(py, "id", "a UUID string", format!("{id:?}"))
            })?,
            (None, None) => return Err(invalid("name", "neither".into())),
            (Some(_), Some(_)) => return Err(invalid("name", "both".into())),
        };
        let handle = semaphore::Pool::new(self.store.clone(), pool_id);
        Ok(Pool::new(handle, self.inline, name))
    }

    fn __repr__(&self) -> String {
        format!("<semaphore_pool.{}>", self.kind)
    }
}

/// An in-process store: pools shared by the threads and asyncio tasks of
/// this process only. No I/O.
#[pyclass(module = "semaphore_pool", extends = Store, frozen)]
pub(crate) struct MemoryStore;

#[pymethods]
impl MemoryStore {
    #[new]
    fn new() -> PyClassInitializer<Self> {
        let store = Arc::new(semaphore_memory::MemoryStore::new());
        Store::new(store, true, "MemoryStore").add_subclass(Self)
    }
}

/// A SQLite file shared by the threads and processes of one machine,
/// Rust processes using `SqliteStore` on the same file included. Opened
/// (and created, tables and all) by the constructor, which blocks.
///
/// `busy_timeout` (seconds, default 5) is how long a statement waits for
/// another connection's lock before a retryable `StorageError`;
/// `synchronous` is `"normal"` (the default) or `"full"` (every commit
/// synced to disk). A lease is bound to this process: it frees the moment
/// the process dies. Raises `SchemaMismatch` for tables of another shape,
/// `StorageError` if the file cannot be opened.
#[pyclass(module = "semaphore_pool", extends = Store, frozen)]
pub(crate) struct SqliteStore;

#[pymethods]
impl SqliteStore {
    #[new]
    #[pyo3(signature = (path, *, busy_timeout = None, synchronous = "normal"))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        busy_timeout: Option<f64>,
        synchronous: &str,
    ) -> PyResult<PyClassInitializer<Self>> {
        use semaphore_sqlite::{SqliteOptions, Synchronous};
        let mut options = SqliteOptions::default();
        if let Some(timeout) = maybe_seconds(py, "busy_timeout", busy_timeout)? {
            options = options.busy_timeout(timeout);
        }
        options = options.synchronous(match synchronous {
            "normal" => Synchronous::Normal,
            "full" => Synchronous::Full,
            other => {
                let allowed = "\"normal\" or \"full\"";
                return Err(crate::errors::invalid(
                    py,
                    "synchronous",
                    allowed,
                    format!("{other:?}"),
                ));
            }
        });
        let opened = py.detach(|| {
            let _entered = runtime().enter();
            semaphore_sqlite::SqliteStore::open_with(path, options)
        });
        let store = opened.map_err(|e| crate::errors::to_py(py, e))?;
        Ok(Store::new(Arc::new(store), false, "SqliteStore").add_subclass(Self))
    }
}

/// A PostgreSQL database shared by processes on many machines, connected
/// by the constructor (which blocks; Ctrl-C interrupts it).
///
/// `url` is a libpq URL or key=value string; `schema` the schema of the
/// store's tables (default `public`, created if missing); `session_timeout`
/// (seconds, default 10, at least 1) how soon a dead process's leases
/// free; `pool_size` the most connections for statements (default 16).
/// Raises `InvalidArgument` naming the option, or `StorageError`
/// (retryable if the server could not be reached).
#[pyclass(module = "semaphore_pool", extends = Store, frozen)]
pub(crate) struct PostgresStore;

#[pymethods]
impl PostgresStore {
    #[new]
    #[pyo3(signature = (url, *, schema = None, session_timeout = None, pool_size = None))]
    fn new(
        py: Python<'_>,
        url: String,
        schema: Option<String>,
        session_timeout: Option<f64>,
        #[pyo3(from_py_with = crate::numbers::pool_size)] pool_size: Option<usize>,
    ) -> PyResult<PyClassInitializer<Self>> {
        use semaphore_postgres::PostgresOptions;
        let mut options = PostgresOptions::default();
        if let Some(schema) = schema {
            options = options.schema(schema);
        }
        if let Some(timeout) = maybe_seconds(py, "session_timeout", session_timeout)? {
            options = options.session_timeout(timeout);
        }
        if let Some(size) = pool_size {
            options = options.pool_size(size);
        }
        let connect =
            async move { semaphore_postgres::PostgresStore::connect_with(&url, options).await };
        let store = wait(py, false, Signals::Checked, connect)?;
        Ok(Store::new(Arc::new(store), false, "PostgresStore").add_subclass(Self))
    }
}

/// A Redis server (7.0 or later) shared by processes on many machines,
/// connected by the constructor (which blocks; Ctrl-C interrupts it).
///
/// `url` is `redis://[user:password@]host[:port][/db]` or
/// `redis+unix:///path`; `prefix` the prefix of every key (default
/// `semaphore`); `session_timeout` (seconds, default 10, at least 1) how
/// soon a dead process's leases free; `restart_grace` (seconds, default
/// 60) how long a pool grants nothing after the server may have lost
/// writes (a restart): set it to the longest ttl you use, or 0 for a
/// server that never loses any. Raises `InvalidArgument` naming the option,
/// or `StorageError`.
#[pyclass(module = "semaphore_pool", extends = Store, frozen)]
pub(crate) struct RedisStore;

#[pymethods]
impl RedisStore {
    #[new]
    #[pyo3(signature = (url, *, prefix = None, session_timeout = None, restart_grace = None))]
    fn new(
        py: Python<'_>,
        url: String,
        prefix: Option<String>,
        session_timeout: Option<f64>,
        restart_grace: Option<f64>,
    ) -> PyResult<PyClassInitializer<Self>> {
        use semaphore_redis::RedisOptions;
        let mut options = RedisOptions::default();
        if let Some(prefix) = prefix {
            options = options.prefix(prefix);
        }
        if let Some(timeout) = maybe_seconds(py, "session_timeout", session_timeout)? {
            options = options.session_timeout(timeout);
        }
        if let Some(grace) = maybe_seconds(py, "restart_grace", restart_grace)? {
            options = options.restart_grace(grace);
        }
        let connect = async move { semaphore_redis::RedisStore::connect_with(&url, options).await };
        let store = wait(py, false, Signals::Checked, connect)?;
        Ok(Store::new(Arc::new(store), false, "RedisStore").add_subclass(Self))
    }
}

/// A MySQL or MariaDB database shared by processes on many machines,
/// connected by the constructor (which blocks; Ctrl-C interrupts it).
/// Wake-ups across processes poll (every 100 ms).
///
/// `url` is `mysql://user[:password]@host[:port]/database`;
/// `table_prefix` the prefix of the store's tables (default `semaphore`);
/// `session_timeout` (seconds, default 10, at least 1) how soon a dead
/// process's leases free; `pool_size` the most connections (default 10).
/// Raises `InvalidArgument` naming the option, or `StorageError`.
#[pyclass(module = "semaphore_pool", extends = Store, frozen)]
pub(crate) struct MysqlStore;

#[pymethods]
impl MysqlStore {
    #[new]
    #[pyo3(signature = (url, *, table_prefix = None, session_timeout = None, pool_size = None))]
    fn new(
        py: Python<'_>,
        url: String,
        table_prefix: Option<String>,
        session_timeout: Option<f64>,
        #[pyo3(from_py_with = crate::numbers::pool_size)] pool_size: Option<usize>,
    ) -> PyResult<PyClassInitializer<Self>> {
        use semaphore_mysql::MysqlOptions;
        let mut options = MysqlOptions::default();
        if let Some(prefix) = table_prefix {
            options = options.table_prefix(prefix);
        }
        if let Some(timeout) = maybe_seconds(py, "session_timeout", session_timeout)? {
            options = options.session_timeout(timeout);
        }
        if let Some(size) = pool_size {
            options = options.pool_size(size);
        }
        let connect = async move { semaphore_mysql::MysqlStore::connect_with(&url, options).await };
        let store = wait(py, false, Signals::Checked, connect)?;
        Ok(Store::new(Arc::new(store), false, "MysqlStore").add_subclass(Self))
    }
}
