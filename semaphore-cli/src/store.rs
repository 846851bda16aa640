//! Which store a command works on, and opening it: one rule for `serve`
//! and every other subcommand (issue 21, item 5).
//!
//! A flag on the command line wins: `--memory` (serve only), `--sqlite
//! FILE`, `--postgres URL`. Without one, `SEMAPHORE_PG_URL` or
//! `SEMAPHORE_DB` choose (both set is a usage error that asks for a flag).
//! Without either, the SQLite file `semaphore.db` in the user's data
//! directory, the same for every subcommand.

use std::path::PathBuf;
use std::sync::Arc;

use semaphore_core::store::Store;
use semaphore_memory::MemoryStore;
use semaphore_postgres::{PostgresOptions, PostgresStore};
use semaphore_sqlite::SqliteStore;

use crate::exit::{Exit, code};

/// A store, as chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Choice {
    Memory,
    Sqlite(PathBuf),
    Postgres { url: String, schema: String },
}

/// The flags that name a store.
#[derive(Debug, Default)]
pub(crate) struct Flags {
    pub(crate) memory: bool,
    pub(crate) sqlite: Option<PathBuf>,
    pub(crate) postgres: Option<String>,
    pub(crate) schema: String,
}

impl Choice {
    /// Flags first, then the environment, then the default file.
    pub(crate) fn from(flags: Flags) -> Result<Self, Exit> {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let postgres = |url| Choice::Postgres {
            url,
            schema: flags.schema.clone(),
        };
        if flags.memory {
            return Ok(Choice::Memory);
        }
        if let Some(path) = flags.sqlite {
            return Ok(Choice::Sqlite(path));
        }
        if let Some(url) = flags.postgres {
            return Ok(postgres(url));
        }
        match (env("SEMAPHORE_PG_URL"), env("SEMAPHORE_DB")) {
            (Some(_), Some(_)) => Err(Exit::new(
                code::USAGE,
                "both SEMAPHORE_PG_URL and SEMAPHORE_DB are set: choose with --postgres URL or \
                 --sqlite FILE",
            )),
            (Some(url), None) => Ok(postgres(url)),
            (None, Some(path)) => Ok(Choice::Sqlite(path.into())),
            (None, None) => Ok(Choice::Sqlite(default_db()?)),
        }
    }

    /// Opens the store; `pool_size` connections for PostgreSQL (`None`:
    /// the store's default). Errors are the store's.
    pub(crate) async fn open(
        &self,
        pool_size: Option<usize>,
    ) -> Result<Arc<dyn Store>, semaphore_core::Error> {
        Ok(match self {
            Choice::Memory => Arc::new(MemoryStore::new()),
            Choice::Sqlite(path) => {
                let path = path.clone();
                let store = tokio::task::spawn_blocking(move || SqliteStore::open(path))
                    .await
                    .map_err(|e| semaphore_core::Error::Storage {
                        operation: "open",
                        retryable: false,
                        source: Box::new(e),
                    })??;
                Arc::new(store)
            }
            Choice::Postgres { url, schema } => {
                let mut options = PostgresOptions::default().schema(schema);
                if let Some(size) = pool_size {
                    options = options.pool_size(size);
                }
                Arc::new(PostgresStore::connect_with(url, options).await?)
            }
        })
    }

    /// What to print about it (never a connection string: it may hold a
    /// password).
    pub(crate) fn shown(&self) -> String {
        match self {
            Choice::Memory => "memory".into(),
            Choice::Sqlite(path) => format!("sqlite {}", path.display()),
            Choice::Postgres { schema, .. } => format!("postgres schema {schema}"),
        }
    }
}

/// `semaphore.db` in the user's data directory ($XDG_DATA_HOME, else
/// ~/.local/share), created if need be.
fn default_db() -> Result<PathBuf, Exit> {
    let base = std::env::var_os("XDG_DATA_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".local/share")))
        .ok_or_else(|| {
            Exit::new(
                code::USAGE,
                "no --sqlite, $SEMAPHORE_DB, $XDG_DATA_HOME or $HOME to find the database",
            )
        })?;
    let dir = base.join("semaphore");
    std::fs::create_dir_all(&dir)
        .map_err(|e| Exit::new(code::IOERR, format!("creating {}: {e}", dir.display())))?;
    Ok(dir.join("semaphore.db"))
}
