//! The store flags every command that opens a store takes (`serve`, `run`,
//! `migrate` and the lease commands), and the [`Flags`] they name.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::duration;
use crate::store::Flags;

/// Which store a command works on, where the store keeps its tables or
/// keys, its restart grace and its session timeout. `serve` flattens it
/// too, with its own help for the flags that name a store (see
/// `serve::store_help`) and `--memory` beside them.
#[derive(Debug, Clone, Args)]
pub(crate) struct StoreArgs {
    /// A SQLite file shared by the processes of this machine. Without
    /// --sqlite, --postgres, --redis, --mysql or --etcd: $SEMAPHORE_PG_URL,
    /// $SEMAPHORE_REDIS_URL, $SEMAPHORE_MYSQL_URL, $SEMAPHORE_ETCD_URL or
    /// $SEMAPHORE_DB, else
    /// semaphore.db in the user's data directory ($XDG_DATA_HOME, else
    /// ~/.local/share). A flag always wins over the environment.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["postgres", "redis", "redis_cluster", "mysql", "etcd"])]
    pub(crate) sqlite: Option<PathBuf>,

    /// A PostgreSQL connection string, for jobs on many machines.
    #[arg(long, value_name = "URL", conflicts_with_all = ["redis", "redis_cluster", "mysql", "etcd"])]
    pub(crate) postgres: Option<String>,

    /// The PostgreSQL schema of the store's tables.
    #[arg(long, value_name = "NAME", default_value = "public")]
    pub(crate) postgres_schema: String,

    /// Prepare the PostgreSQL store's statements once per connection: the
    /// server then skips parsing and planning each call (about 10% on a
    /// hot pool). Not behind PgBouncer in transaction mode before 1.21.
    #[arg(long)]
    pub(crate) postgres_prepared_statements: bool,

    /// Connect to PostgreSQL without making or migrating the store's
    /// tables (a runtime role with no CREATE right): a schema that is not
    /// at this version is refused; run `semaphore migrate` first.
    #[arg(long)]
    pub(crate) postgres_no_migrate: bool,

    /// A Redis URL (redis://host:port/db), for jobs on many machines.
    #[arg(long, value_name = "URL", conflicts_with_all = ["mysql", "redis_cluster", "etcd"])]
    pub(crate) redis: Option<String>,

    /// A Redis Cluster: some or all of its nodes' URLs, comma-separated
    /// (redis://host:port,redis://host:port), for jobs on many machines.
    #[arg(long, value_name = "URL,URL,...", conflicts_with_all = ["mysql", "etcd"])]
    pub(crate) redis_cluster: Option<String>,

    /// A MySQL or MariaDB URL (mysql://user:password@host:port/database),
    /// for jobs on many machines.
    #[arg(long, value_name = "URL", conflicts_with = "etcd")]
    pub(crate) mysql: Option<String>,

    /// An etcd cluster (v3 API, etcd 3.4 or later): some or all of its
    /// members' client URLs, comma-separated (http://host:2379,...), for
    /// jobs on many machines. Leases end by etcd's own leases, in whole
    /// seconds.
    #[arg(long, value_name = "URL,URL,...")]
    pub(crate) etcd: Option<String>,

    /// The prefix of the etcd store's keys.
    #[arg(long, value_name = "PREFIX", default_value = "semaphore")]
    pub(crate) etcd_prefix: String,

    /// The prefix of the MySQL store's tables.
    #[arg(long, value_name = "PREFIX", default_value = "semaphore")]
    pub(crate) mysql_prefix: String,

    /// The prefix of the Redis store's keys.
    #[arg(long, value_name = "PREFIX", default_value = "semaphore")]
    pub(crate) redis_prefix: String,

    /// How long a pool created on a Redis server younger than this grants
    /// nothing: a restart that lost the data must not hand out slots whose
    /// holders still run. Set it to the longest ttl in use; 0s turns it off.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = duration)]
    pub(crate) redis_restart_grace: Duration,

    /// How long the store's session, which this process's leases belong
    /// to, outlives its last heartbeat (PostgreSQL, Redis, MySQL, etcd):
    /// a network blip or a server restart shorter than this ends no lease,
    /// and a process killed outright loses its slots after it. At least 1s.
    /// Default 10s; for `run`, 30s.
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub(crate) session_timeout: Option<Duration>,
}

impl StoreArgs {
    /// The store these flags name, as [`crate::store::Choice::from`] takes
    /// it; `memory` is false (only `serve` has `--memory`, and sets it).
    pub(crate) fn flags(&self) -> Flags {
        Flags {
            memory: false,
            sqlite: self.sqlite.clone(),
            postgres: self.postgres.clone(),
            schema: self.postgres_schema.clone(),
            prepared: self.postgres_prepared_statements,
            no_migrate: self.postgres_no_migrate,
            redis: self.redis.clone(),
            redis_cluster: self.redis_cluster.clone(),
            prefix: self.redis_prefix.clone(),
            grace: self.redis_restart_grace,
            mysql: self.mysql.clone(),
            mysql_prefix: self.mysql_prefix.clone(),
            etcd: self.etcd.clone(),
            etcd_prefix: self.etcd_prefix.clone(),
            session: self.session_timeout,
        }
    }
}
