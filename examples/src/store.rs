//! Opening the store an example names: a PostgreSQL database, a Redis
//! server, a MySQL database or a SQLite file.

use std::sync::Arc;
use std::time::Duration;

use semaphore_mysql::{MysqlOptions, MysqlStore};
use semaphore_postgres::{PostgresOptions, PostgresStore};
use semaphore_redis::{RedisOptions, RedisStore};
use semaphore_sqlite::store::Store;
use semaphore_sqlite::{Error, SqliteStore};

/// The variable naming the PostgreSQL schema examples use (default
/// `public`).
pub const SCHEMA_VAR: &str = "SEMAPHORE_PG_SCHEMA";

/// The variable naming the Redis key prefix examples use (default
/// `semaphore`).
pub const PREFIX_VAR: &str = "SEMAPHORE_REDIS_PREFIX";

/// The variable naming the MySQL table prefix examples use (default
/// `semaphore`).
pub const TABLES_VAR: &str = "SEMAPHORE_MYSQL_PREFIX";

/// The variable giving the session timeout, in milliseconds, of the
/// networked stores the examples open (default: the store's, 10 s; at
/// least 1000): a process killed outright loses its bound leases within
/// it.
pub const SESSION_VAR: &str = "SEMAPHORE_SESSION_TIMEOUT_MS";

/// The variable giving the Redis store's restart grace, in milliseconds
/// (default: the store's, 60 s; 0 turns it off, for a fresh server): see
/// [`RedisOptions::restart_grace`].
pub const GRACE_VAR: &str = "SEMAPHORE_REDIS_RESTART_GRACE_MS";

/// The duration the variable `name` gives in milliseconds, if it gives
/// one.
fn millis(name: &'static str) -> Result<Option<Duration>, Error> {
    let Ok(ms) = std::env::var(name) else {
        return Ok(None);
    };
    ms.parse()
        .map(|ms| Some(Duration::from_millis(ms)))
        .map_err(|_| Error::InvalidArgument {
            field: name,
            allowed: "a whole number of milliseconds".to_string(),
            got: ms,
        })
}

/// Whether `spec` is a MySQL URL (`mysql://...`).
pub fn is_mysql(spec: &str) -> bool {
    spec.starts_with("mysql://")
}

/// Whether `spec` is a Redis URL (`redis://...`, `redis+unix://...`).
pub fn is_redis(spec: &str) -> bool {
    spec.starts_with("redis://") || spec.starts_with("redis+unix://")
}

/// Whether `spec` is a PostgreSQL connection string (`postgres://...`,
/// `postgresql://...`, or key=value with a `host=`) rather than a path.
pub fn is_postgres(spec: &str) -> bool {
    spec.starts_with("postgres://") || spec.starts_with("postgresql://") || spec.contains("host=")
}

/// The store `spec` names: a PostgreSQL database, in the schema
/// `SEMAPHORE_PG_SCHEMA` names; a Redis server, under the key prefix
/// `SEMAPHORE_REDIS_PREFIX` names; a MySQL database, under the table
/// prefix `SEMAPHORE_MYSQL_PREFIX` names; or else the SQLite file at that
/// path. A networked store's session timeout is [`SESSION_VAR`]'s, the
/// Redis store's restart grace [`GRACE_VAR`]'s.
///
/// # Errors
/// Those of [`PostgresStore::connect_with`], [`RedisStore::connect_with`],
/// [`MysqlStore::connect_with`] or [`SqliteStore::open`];
/// [`Error::InvalidArgument`] if [`SESSION_VAR`] or [`GRACE_VAR`] is not a
/// number, or the session timeout is below 1000.
pub async fn open(spec: &str) -> Result<Arc<dyn Store>, Error> {
    let session = millis(SESSION_VAR)?;
    if is_mysql(spec) {
        let mut options = MysqlOptions::default().pool_size(2);
        if let Some(timeout) = session {
            options = options.session_timeout(timeout);
        }
        if let Ok(prefix) = std::env::var(TABLES_VAR) {
            options = options.table_prefix(prefix);
        }
        return Ok(Arc::new(MysqlStore::connect_with(spec, options).await?));
    }
    if is_redis(spec) {
        let mut options = RedisOptions::default();
        if let Some(timeout) = session {
            options = options.session_timeout(timeout);
        }
        if let Some(grace) = millis(GRACE_VAR)? {
            options = options.restart_grace(grace);
        }
        if let Ok(prefix) = std::env::var(PREFIX_VAR) {
            options = options.prefix(prefix);
        }
        return Ok(Arc::new(RedisStore::connect_with(spec, options).await?));
    }
    if is_postgres(spec) {
        let mut options = PostgresOptions::default().pool_size(2);
        if let Some(timeout) = session {
            options = options.session_timeout(timeout);
        }
        if let Ok(schema) = std::env::var(SCHEMA_VAR) {
            options = options.schema(schema);
        }
        return Ok(Arc::new(PostgresStore::connect_with(spec, options).await?));
    }
    Ok(Arc::new(SqliteStore::open(spec)?))
}
