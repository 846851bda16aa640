//! Which store a command works on, and opening it: one rule for `serve`
//! and every other subcommand (issue 21, item 5).
//!
//! A flag on the command line wins: `--memory` (serve only), `--sqlite
//! FILE`, `--postgres URL`, `--redis URL`, `--mysql URL`. Without one,
//! `SEMAPHORE_PG_URL`, `SEMAPHORE_REDIS_URL`, `SEMAPHORE_MYSQL_URL` or
//! `SEMAPHORE_DB` choose (more than one set is a usage error that asks for
//! a flag).
//! Without either, the SQLite file `semaphore.db` in the user's data
//! directory, the same for every subcommand.

use std::path::PathBuf;
use std::sync::Arc;

use semaphore_core::store::Store;
use semaphore_memory::MemoryStore;
use semaphore_mysql::{MysqlOptions, MysqlStore};
use semaphore_postgres::{PostgresOptions, PostgresStore};
use semaphore_redis::{RedisOptions, RedisStore};
use semaphore_sqlite::SqliteStore;

use crate::exit::{Exit, code};

/// A store, as chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Choice {
    Memory,
    Sqlite(PathBuf),
    Postgres {
        url: String,
        schema: String,
        /// `--postgres-prepared-statements`.
        prepared: bool,
    },
    Redis {
        url: String,
        prefix: String,
        grace: std::time::Duration,
    },
    Mysql {
        url: String,
        prefix: String,
    },
}

/// The flags that name a store.
#[derive(Debug, Default)]
pub(crate) struct Flags {
    pub(crate) memory: bool,
    pub(crate) sqlite: Option<PathBuf>,
    pub(crate) postgres: Option<String>,
    pub(crate) schema: String,
    pub(crate) prepared: bool,
    pub(crate) redis: Option<String>,
    pub(crate) prefix: String,
    pub(crate) grace: std::time::Duration,
    pub(crate) mysql: Option<String>,
    pub(crate) mysql_prefix: String,
}

impl Choice {
    /// Flags first, then the environment, then the default file.
    pub(crate) fn from(flags: Flags) -> Result<Self, Exit> {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let postgres = |url| Choice::Postgres {
            url,
            schema: flags.schema.clone(),
            prepared: flags.prepared,
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
        let redis = |url| Choice::Redis {
            url,
            prefix: flags.prefix.clone(),
            grace: flags.grace,
        };
        if let Some(url) = flags.redis {
            return Ok(redis(url));
        }
        let mysql = |url| Choice::Mysql {
            url,
            prefix: flags.mysql_prefix.clone(),
        };
        if let Some(url) = flags.mysql.clone() {
            return Ok(mysql(url));
        }
        let set = [
            env("SEMAPHORE_PG_URL").map(postgres),
            env("SEMAPHORE_REDIS_URL").map(redis),
            env("SEMAPHORE_MYSQL_URL").map(mysql),
            env("SEMAPHORE_DB").map(|path| Choice::Sqlite(path.into())),
        ];
        let mut set = set.into_iter().flatten();
        match (set.next(), set.next()) {
            (Some(_), Some(_)) => Err(Exit::new(
                code::USAGE,
                "more than one of SEMAPHORE_PG_URL, SEMAPHORE_REDIS_URL, SEMAPHORE_MYSQL_URL \
                 and SEMAPHORE_DB is set: choose with --postgres URL, --redis URL, --mysql URL \
                 or --sqlite FILE",
            )),
            (Some(choice), None) => Ok(choice),
            (None, _) => Ok(Choice::Sqlite(default_db()?)),
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
            Choice::Postgres {
                url,
                schema,
                prepared,
            } => {
                let mut options = PostgresOptions::default()
                    .schema(schema)
                    .prepared_statements(*prepared);
                if let Some(size) = pool_size {
                    options = options.pool_size(size);
                }
                Arc::new(PostgresStore::connect_with(url, options).await?)
            }
            Choice::Redis { url, prefix, grace } => {
                let options = RedisOptions::default().prefix(prefix).restart_grace(*grace);
                Arc::new(RedisStore::connect_with(url, options).await?)
            }
            Choice::Mysql { url, prefix } => {
                let mut options = MysqlOptions::default().table_prefix(prefix);
                if let Some(size) = pool_size {
                    options = options.pool_size(size);
                }
                Arc::new(MysqlStore::connect_with(url, options).await?)
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
            Choice::Redis { prefix, .. } => format!("redis prefix {prefix}"),
            Choice::Mysql { prefix, .. } => format!("mysql tables {prefix}_*"),
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
