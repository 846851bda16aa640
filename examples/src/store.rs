//! Opening the store an example names: a PostgreSQL database, a Redis
//! server, a MySQL database or a SQLite file.

use std::sync::Arc;

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
/// path.
///
/// # Errors
/// Those of [`PostgresStore::connect_with`], [`RedisStore::connect_with`],
/// [`MysqlStore::connect_with`] or [`SqliteStore::open`].
pub async fn open(spec: &str) -> Result<Arc<dyn Store>, Error> {
    if is_mysql(spec) {
        let mut options = MysqlOptions::default().pool_size(2);
        if let Ok(prefix) = std::env::var(TABLES_VAR) {
            options = options.table_prefix(prefix);
        }
        return Ok(Arc::new(MysqlStore::connect_with(spec, options).await?));
    }
    if is_redis(spec) {
        let mut options = RedisOptions::default();
        if let Ok(prefix) = std::env::var(PREFIX_VAR) {
            options = options.prefix(prefix);
        }
        return Ok(Arc::new(RedisStore::connect_with(spec, options).await?));
    }
    if is_postgres(spec) {
        let mut options = PostgresOptions::default().pool_size(2);
        if let Ok(schema) = std::env::var(SCHEMA_VAR) {
            options = options.schema(schema);
        }
        return Ok(Arc::new(PostgresStore::connect_with(spec, options).await?));
    }
    Ok(Arc::new(SqliteStore::open(spec)?))
}
