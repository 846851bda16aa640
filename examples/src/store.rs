//! Opening the store an example names: a PostgreSQL database or a SQLite
//! file.

use std::sync::Arc;

use semaphore_postgres::{PostgresOptions, PostgresStore};
use semaphore_sqlite::store::Store;
use semaphore_sqlite::{Error, SqliteStore};

/// The variable naming the PostgreSQL schema examples use (default
/// `public`).
pub const SCHEMA_VAR: &str = "SEMAPHORE_PG_SCHEMA";

/// Whether `spec` is a PostgreSQL connection string (`postgres://...`,
/// `postgresql://...`, or key=value with a `host=`) rather than a path.
pub fn is_postgres(spec: &str) -> bool {
    spec.starts_with("postgres://") || spec.starts_with("postgresql://") || spec.contains("host=")
}

/// The store `spec` names: a PostgreSQL database, in the schema
/// `SEMAPHORE_PG_SCHEMA` names, or else the SQLite file at that path.
///
/// # Errors
/// Those of [`PostgresStore::connect_with`] or [`SqliteStore::open`].
pub async fn open(spec: &str) -> Result<Arc<dyn Store>, Error> {
    if is_postgres(spec) {
        let mut options = PostgresOptions::default().pool_size(2);
        if let Ok(schema) = std::env::var(SCHEMA_VAR) {
            options = options.schema(schema);
        }
        return Ok(Arc::new(PostgresStore::connect_with(spec, options).await?));
    }
    Ok(Arc::new(SqliteStore::open(spec)?))
}
