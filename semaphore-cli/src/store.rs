//! Which store a command works on, and opening it: one rule for `serve`
//! and every other subcommand.
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
use std::time::Duration;

use semaphore_core::store::Store;
use semaphore_etcd::{EtcdOptions, EtcdStore};
use semaphore_memory::MemoryStore;
use semaphore_mysql::{MysqlOptions, MysqlStore};
use semaphore_postgres::{PostgresOptions, PostgresStore};
use semaphore_redis::{RedisOptions, RedisStore};
use semaphore_sqlite::SqliteStore;

use crate::exit::{Exit, code};

mod line;

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
        /// `--session-timeout`; `None`: the store's default.
        session: Option<Duration>,
        /// Whether connecting may make or migrate the tables (not
        /// `--postgres-no-migrate`).
        migrate: bool,
    },
    Redis {
        /// One server's URL, or (`cluster`) a cluster's nodes' URLs,
        /// comma-separated.
        url: String,
        /// `--redis-cluster`.
        cluster: bool,
        prefix: String,
        grace: Duration,
        session: Option<Duration>,
    },
    Mysql {
        url: String,
        prefix: String,
        session: Option<Duration>,
    },
    Etcd {
        /// The members' client URLs, comma-separated.
        urls: String,
        prefix: String,
        session: Option<Duration>,
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
    /// `--postgres-no-migrate`.
    pub(crate) no_migrate: bool,
    pub(crate) redis: Option<String>,
    /// `--redis-cluster`: the nodes' URLs, comma-separated.
    pub(crate) redis_cluster: Option<String>,
    pub(crate) prefix: String,
    pub(crate) grace: Duration,
    pub(crate) mysql: Option<String>,
    pub(crate) mysql_prefix: String,
    /// `--etcd`: the members' URLs, comma-separated.
    pub(crate) etcd: Option<String>,
    pub(crate) etcd_prefix: String,
    /// `--session-timeout`, for the stores that keep sessions.
    pub(crate) session: Option<Duration>,
}

impl Choice {
    /// Flags first, then the environment, then the default file.
    pub(crate) fn from(flags: Flags) -> Result<Self, Exit> {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let postgres = |url| Choice::Postgres {
            url,
            schema: flags.schema.clone(),
            prepared: flags.prepared,
            session: flags.session,
            migrate: !flags.no_migrate,
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
        let redis = |url, cluster| Choice::Redis {
            url,
            cluster,
            prefix: flags.prefix.clone(),
            grace: flags.grace,
            session: flags.session,
        };
        if let Some(url) = flags.redis {
            return Ok(redis(url, false));
        }
        if let Some(urls) = flags.redis_cluster {
            return Ok(redis(urls, true));
        }
        let mysql = |url| Choice::Mysql {
            url,
            prefix: flags.mysql_prefix.clone(),
            session: flags.session,
        };
        if let Some(url) = flags.mysql.clone() {
            return Ok(mysql(url));
        }
        let etcd = |urls| Choice::Etcd {
            urls,
            prefix: flags.etcd_prefix.clone(),
            session: flags.session,
        };
        if let Some(urls) = flags.etcd.clone() {
            return Ok(etcd(urls));
        }
        let set = [
            env("SEMAPHORE_PG_URL").map(postgres),
            env("SEMAPHORE_REDIS_URL").map(|url| redis(url, false)),
            env("SEMAPHORE_MYSQL_URL").map(mysql),
            env("SEMAPHORE_ETCD_URL").map(etcd),
            env("SEMAPHORE_DB").map(|path| Choice::Sqlite(path.into())),
        ];
        let mut set = set.into_iter().flatten();
        match (set.next(), set.next()) {
            (Some(_), Some(_)) => Err(Exit::new(
                code::USAGE,
                "more than one of SEMAPHORE_PG_URL, SEMAPHORE_REDIS_URL, SEMAPHORE_MYSQL_URL, \
                 SEMAPHORE_ETCD_URL and SEMAPHORE_DB is set: choose with --postgres URL, \
                 --redis URL, --mysql URL, --etcd URLS or --sqlite FILE",
            )),
            (Some(choice), None) => Ok(choice),
            (None, _) => Ok(Choice::Sqlite(default_db()?)),
        }
    }

    /// For a command that only reads (`inspect`, `pools`, `status`): a
    /// SQLite file that does not exist is refused (exit 66, naming it), not
    /// made: opening it would create an empty database, and a mistyped
    /// path would show as a store without pools.
    pub(crate) fn for_reading(self) -> Result<Self, Exit> {
        match &self {
            Choice::Sqlite(path) if !path.exists() => Err(Exit::new(
                code::NOINPUT,
                format!(
                    "no database at {}: nothing was registered there yet (`semaphore register` \
                     or `semaphore run --count` creates it); check --sqlite or $SEMAPHORE_DB",
                    path.display()
                ),
            )),
            _ => Ok(self),
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
                session,
                migrate,
            } => {
                let mut options = PostgresOptions::default()
                    .schema(schema)
                    .prepared_statements(*prepared)
                    .migrate(*migrate);
                if let Some(size) = pool_size {
                    options = options.pool_size(size);
                }
                if let Some(timeout) = session {
                    options = options.session_timeout(*timeout);
                }
                Arc::new(PostgresStore::connect_with(url, options).await?)
            }
            Choice::Redis {
                url,
                cluster,
                prefix,
                grace,
                session,
            } => {
                let mut options = RedisOptions::default().prefix(prefix).restart_grace(*grace);
                if let Some(timeout) = session {
                    options = options.session_timeout(*timeout);
                }
                if *cluster {
                    let urls: Vec<&str> = url.split(',').map(str::trim).collect();
                    Arc::new(RedisStore::connect_cluster_with(&urls, options).await?)
                } else {
                    Arc::new(RedisStore::connect_with(url, options).await?)
                }
            }
            Choice::Mysql {
                url,
                prefix,
                session,
            } => {
                let mut options = MysqlOptions::default().table_prefix(prefix);
                if let Some(size) = pool_size {
                    options = options.pool_size(size);
                }
                if let Some(timeout) = session {
                    options = options.session_timeout(*timeout);
                }
                Arc::new(MysqlStore::connect_with(url, options).await?)
            }
            Choice::Etcd {
                urls,
                prefix,
                session,
            } => {
                let mut options = EtcdOptions::default().prefix(prefix);
                if let Some(timeout) = session {
                    options = options.session_timeout(*timeout);
                }
                let endpoints: Vec<&str> = urls.split(',').map(str::trim).collect();
                Arc::new(EtcdStore::connect_with(&endpoints, options).await?)
            }
        })
    }

    /// The session timeout the store keeps its sessions with, `None` for
    /// a store without sessions.
    pub(crate) fn session_timeout(&self) -> Option<Duration> {
        let default = semaphore_core::store::DEFAULT_SESSION_TIMEOUT;
        match self {
            Choice::Memory | Choice::Sqlite(_) => None,
            Choice::Postgres { session, .. }
            | Choice::Redis { session, .. }
            | Choice::Mysql { session, .. }
            | Choice::Etcd { session, .. } => Some(session.unwrap_or(default)),
        }
    }

    /// The same store with session timeout `timeout` unless one was set.
    pub(crate) fn with_default_session(mut self, timeout: Duration) -> Self {
        if let Choice::Postgres { session, .. }
        | Choice::Redis { session, .. }
        | Choice::Mysql { session, .. }
        | Choice::Etcd { session, .. } = &mut self
        {
            session.get_or_insert(timeout);
        }
        self
    }

    /// What to print about it (never a connection string: it may hold a
    /// password).
    pub(crate) fn shown(&self) -> String {
        match self {
            Choice::Memory => "memory".into(),
            Choice::Sqlite(path) => format!("sqlite {}", path.display()),
            Choice::Postgres { schema, .. } => format!("postgres schema {schema}"),
            Choice::Redis {
                prefix, cluster, ..
            } => format!(
                "redis{} prefix {prefix}",
                if *cluster { " cluster" } else { "" }
            ),
            Choice::Mysql { prefix, .. } => format!("mysql tables {prefix}_*"),
            Choice::Etcd { prefix, .. } => format!("etcd prefix {prefix}/"),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_choice_survives_its_line() {
        use std::os::unix::ffi::OsStringExt;
        let odd = PathBuf::from(std::ffi::OsString::from_vec(b"/tmp/a b\n\xff.db".to_vec()));
        for choice in [
            Choice::Memory,
            Choice::Sqlite(odd),
            Choice::Postgres {
                url: "postgresql://u:p w@h/db".into(),
                schema: "s".into(),
                prepared: true,
                session: Some(Duration::from_secs(30)),
                migrate: false,
            },
            Choice::Redis {
                url: "redis://h/".into(),
                cluster: false,
                prefix: "p".into(),
                grace: Duration::from_secs(60),
                session: None,
            },
            Choice::Redis {
                url: "redis://a:1,redis://b:2".into(),
                cluster: true,
                prefix: "p".into(),
                grace: Duration::from_secs(5),
                session: Some(Duration::from_secs(3)),
            },
            Choice::Mysql {
                url: "mysql://root@h/db".into(),
                prefix: "".into(),
                session: Some(Duration::from_secs(2)),
            },
            Choice::Etcd {
                urls: "http://a:2379,http://b:2379".into(),
                prefix: "p".into(),
                session: None,
            },
        ] {
            let line = choice.to_line();
            assert!(!line.contains('\n'), "{line}");
            assert_eq!(Choice::from_line(&line), Some(choice));
        }
        assert_eq!(Choice::from_line("zz"), None);
    }
}
