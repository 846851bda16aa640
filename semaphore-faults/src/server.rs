//! The throwaway servers of the store crates' `testing` modules, as the
//! orchestrator uses them: where a proxy forwards, what URL a holder gets,
//! and the server-side faults (restart, idle-session timeout, connection
//! kills; SQLite's side files).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use semaphore_mysql::mysql_async;
use semaphore_mysql::mysql_async::prelude::Queryable;
use semaphore_postgres::tokio_postgres;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;

use crate::proxy::{Proxies, Proxy, Upstream};
use semaphore_redis::testing::TestCluster;

/// The store a run exercises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// `semaphore-postgres`, on a throwaway PostgreSQL.
    Postgres,
    /// `semaphore-redis`, on a throwaway `redis-server`.
    Redis,
    /// `semaphore-redis` on a throwaway Redis Cluster (three masters, one
    /// replica each), each holder through a proxy per node.
    RedisCluster,
    /// `semaphore-mysql`, on a throwaway MariaDB.
    Mysql,
    /// `semaphore-sqlite`, on a file in a temporary directory.
    Sqlite,
}

impl StoreKind {
    /// The name the holder binary takes (`--store`).
    pub fn name(self) -> &'static str {
        match self {
            StoreKind::Postgres => "postgres",
            StoreKind::Redis => "redis",
            StoreKind::RedisCluster => "redis-cluster",
            StoreKind::Mysql => "mysql",
            StoreKind::Sqlite => "sqlite",
        }
    }

    /// Whether holders reach it over the network (through proxies).
    pub fn networked(self) -> bool {
        self != StoreKind::Sqlite
    }
}

/// How long a server-side fault's statement may take.
const ADMIN_BOUND: Duration = Duration::from_secs(15);

/// A running server (or SQLite file) for one run.
#[derive(Debug)]
pub enum Server {
    /// A throwaway PostgreSQL server.
    Postgres {
        /// The server.
        server: Arc<semaphore_postgres::testing::TestServer>,
        /// Its unix socket, where proxies forward.
        socket: PathBuf,
    },
    /// A throwaway Redis server.
    Redis {
        /// The server.
        server: Arc<semaphore_redis::testing::TestServer>,
        /// Its unix socket, where proxies forward.
        socket: PathBuf,
    },
    /// A throwaway Redis Cluster.
    RedisCluster {
        /// The cluster.
        cluster: Arc<TestCluster>,
        /// Its nodes' ports on `127.0.0.1`, where proxies forward.
        ports: Vec<u16>,
        /// The ports of the master and the replica that served the pool's
        /// slot when it was registered: that pair keeps the slot through
        /// failovers, which only swap their roles.
        shard: std::sync::OnceLock<[u16; 2]>,
    },
    /// A throwaway MariaDB server.
    Mysql {
        /// The server.
        server: Arc<semaphore_mysql::testing::TestServer>,
        /// Its unix socket, where proxies forward.
        socket: PathBuf,
        /// The database the store's tables go in.
        database: String,
    },
    /// A SQLite file in a temporary directory.
    Sqlite {
        /// The directory, removed on drop.
        _dir: tempfile::TempDir,
        /// The database file.
        db: PathBuf,
    },
}

fn after<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    text.find(prefix).map(|i| &text[i + prefix.len()..])
}

impl Server {
    /// Starts a throwaway server of `kind` (blocking: seconds).
    pub fn start(kind: StoreKind) -> Result<Self, String> {
        Ok(match kind {
            StoreKind::Postgres => {
                let server = semaphore_postgres::testing::TestServer::start()?;
                // "host=/tmp/semaphore-pg-... user=postgres dbname=postgres"
                let host = server
                    .url()
                    .split_whitespace()
                    .find_map(|kv| kv.strip_prefix("host="))
                    .ok_or_else(|| format!("no host= in {:?}", server.url()))?;
                let socket = Path::new(host).join(".s.PGSQL.5432");
                Server::Postgres {
                    server: Arc::new(server),
                    socket,
                }
            }
            StoreKind::Redis => {
                let server = semaphore_redis::testing::TestServer::start()?;
                let socket = server
                    .url()
                    .strip_prefix("redis+unix://")
                    .map(PathBuf::from)
                    .ok_or_else(|| format!("not a unix socket URL: {:?}", server.url()))?;
                Server::Redis {
                    server: Arc::new(server),
                    socket,
                }
            }
            StoreKind::RedisCluster => {
                let cluster = TestCluster::start()?;
                let ports = cluster
                    .urls()
                    .iter()
                    .filter_map(|url| url.rsplit(':').next()?.parse().ok())
                    .collect();
                Server::RedisCluster {
                    cluster: Arc::new(cluster),
                    ports,
                    shard: std::sync::OnceLock::new(),
                }
            }
            StoreKind::Mysql => {
                let server = semaphore_mysql::testing::TestServer::start()?;
                // "mysql://root@localhost/semaphore_test?socket=/tmp/.../mysqld.sock"
                let url = server.url().to_string();
                let socket = after(&url, "?socket=")
                    .map(PathBuf::from)
                    .ok_or_else(|| format!("no socket in {url:?}"))?;
                let database = after(&url, "@localhost/")
                    .and_then(|rest| rest.split('?').next())
                    .ok_or_else(|| format!("no database in {url:?}"))?
                    .to_string();
                Server::Mysql {
                    server: Arc::new(server),
                    socket,
                    database,
                }
            }
            StoreKind::Sqlite => {
                let dir = tempfile::Builder::new()
                    .prefix("semaphore-faults-sqlite-")
                    .tempdir()
                    .map_err(|e| format!("a temporary directory: {e}"))?;
                let db = dir.path().join("faults.db");
                Server::Sqlite { _dir: dir, db }
            }
        })
    }

    /// A throwaway networked server of `kind` with `pool` registered
    /// (`count` slots, a Redis restart grace of `ttl`) in a fresh
    /// namespace, and a proxy in front of it: the start of a test of one
    /// fault. Panics if the server cannot start (a test's set-up).
    pub async fn proxied(
        kind: StoreKind,
        pool: &str,
        count: u32,
        ttl: Duration,
    ) -> (Server, String, Proxy) {
        let server = tokio::task::spawn_blocking(move || Server::start(kind))
            .await
            .expect("the server's start")
            .unwrap_or_else(|e| panic!("starting a {} server: {e}", kind.name()));
        let namespace = server.fresh_namespace();
        server
            .prepare(&namespace, pool, count, ttl)
            .await
            .unwrap_or_else(|e| panic!("registering {pool}: {e}"));
        let upstream = server
            .upstream()
            .expect("one networked server (a cluster's holders take holder_args)");
        let proxy = Proxy::start(upstream).await.expect("a proxy");
        (server, namespace, proxy)
    }

    /// The server's own URL (unix socket), or the SQLite file's path.
    pub fn url(&self) -> String {
        match self {
            Server::Postgres { server, .. } => server.url().to_string(),
            Server::Redis { server, .. } => server.url().to_string(),
            Server::RedisCluster { cluster, .. } => cluster.urls().join(","),
            Server::Mysql { server, .. } => server.url().to_string(),
            Server::Sqlite { db, .. } => db.display().to_string(),
        }
    }

    /// Where a single server's proxy forwards; `None` for SQLite and for
    /// a cluster (see [`upstreams`](Server::upstreams)).
    pub fn upstream(&self) -> Option<Upstream> {
        match self {
            Server::Postgres { socket, .. }
            | Server::Redis { socket, .. }
            | Server::Mysql { socket, .. } => Some(Upstream::Unix(socket.clone())),
            Server::RedisCluster { .. } | Server::Sqlite { .. } => None,
        }
    }

    /// Where a holder's proxies forward: the server, or each node of a
    /// cluster; none for SQLite.
    pub fn upstreams(&self) -> Vec<Upstream> {
        match self {
            Server::RedisCluster { ports, .. } => ports
                .iter()
                .map(|port| Upstream::Tcp(([127, 0, 0, 1], *port).into()))
                .collect(),
            _ => self.upstream().into_iter().collect(),
        }
    }

    /// A schema, key prefix or table prefix no other run uses.
    pub fn fresh_namespace(&self) -> String {
        match self {
            Server::Postgres { .. } => semaphore_postgres::testing::TestServer::fresh_schema(),
            Server::Redis { .. } | Server::RedisCluster { .. } => {
                semaphore_redis::testing::TestServer::fresh_prefix()
            }
            Server::Mysql { .. } => semaphore_mysql::testing::TestServer::fresh_prefix(),
            Server::Sqlite { .. } => "-".into(),
        }
    }

    /// The arguments that tell a holder in `slot` how to reach the store
    /// through `proxies` (`None`: SQLite): `--url`, and PostgreSQL's
    /// `--listen-url` or a cluster's `--node-map` (each node's address, as
    /// it announces it, to the proxy's).
    pub fn holder_args(&self, proxies: Option<&Proxies>, slot: u32) -> Vec<String> {
        let Server::RedisCluster { .. } = self else {
            let (url, listen) = self.holder_url(proxies.map_or(0, Proxies::port), slot);
            let mut args = vec!["--url".to_string(), url];
            if let Some(listen) = listen {
                args.extend(["--listen-url".to_string(), listen]);
            }
            return args;
        };
        let (mut urls, mut map) = (Vec::new(), Vec::new());
        for (upstream, proxy) in proxies.into_iter().flat_map(Proxies::each) {
            let Upstream::Tcp(node) = upstream else {
                continue;
            };
            urls.push(format!("redis://{}", proxy.addr()));
            map.push(format!("{node}={}", proxy.addr()));
        }
        vec![
            "--url".into(),
            urls.join(","),
            "--node-map".into(),
            map.join(","),
        ]
    }

    /// The URL (and, for PostgreSQL, the listener's URL) a holder in
    /// `slot` uses, through the proxy on `port`; a cluster's nodes as
    /// they are (see [`holder_args`](Server::holder_args)).
    pub fn holder_url(&self, port: u16, slot: u32) -> (String, Option<String>) {
        match self {
            Server::Postgres { .. } => {
                let url = format!(
                    "host=127.0.0.1 port={port} user=postgres dbname=postgres \
                     application_name=faults-holder-{slot}"
                );
                (url.clone(), Some(url))
            }
            Server::Redis { .. } => (format!("redis://127.0.0.1:{port}/"), None),
            Server::RedisCluster { .. } => {
                panic!("a cluster has a proxy per node: take holder_args")
            }
            // prefer_socket=false: else mysql_async looks up the server's
            // socket and goes around the proxy.
            Server::Mysql { database, .. } => (
                format!("mysql://root@127.0.0.1:{port}/{database}?prefer_socket=false"),
                None,
            ),
            Server::Sqlite { db, .. } => (db.display().to_string(), None),
        }
    }

    /// Creates the store's tables in `namespace` and registers `pool` with
    /// `count` slots, straight to the server, so that the holders do not
    /// race to create them.
    /// The Redis store's restart grace is `ttl`, as the holders' (a pool
    /// registered with the default grace of 60 s on a young server would
    /// grant nothing for a minute).
    pub async fn prepare(
        &self,
        namespace: &str,
        pool: &str,
        count: u32,
        ttl: Duration,
    ) -> Result<(), String> {
        use semaphore_sqlite::store::Store;
        let store: Arc<dyn Store> = match self {
            Server::Postgres { server, .. } => Arc::new(
                semaphore_postgres::PostgresStore::connect_with(
                    server.url(),
                    semaphore_postgres::PostgresOptions::default().schema(namespace),
                )
                .await
                .map_err(|e| e.to_string())?,
            ),
            Server::Redis { server, .. } => Arc::new(
                semaphore_redis::RedisStore::connect_with(
                    server.url(),
                    semaphore_redis::RedisOptions::default()
                        .prefix(namespace)
                        .restart_grace(ttl),
                )
                .await
                .map_err(|e| e.to_string())?,
            ),
            Server::RedisCluster { cluster, shard, .. } => {
                let tag = format!(
                    "{{{}}}",
                    semaphore_sqlite::PoolId::from_name(pool).as_uuid()
                );
                let (master, replica) = cluster.serving(&tag)?;
                let _ = shard.set([master, replica]);
                let urls = cluster.urls();
                let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
                Arc::new(
                    semaphore_redis::RedisStore::connect_cluster_with(
                        &urls,
                        semaphore_redis::RedisOptions::default()
                            .prefix(namespace)
                            .restart_grace(ttl),
                    )
                    .await
                    .map_err(|e| e.to_string())?,
                )
            }
            Server::Mysql { server, .. } => Arc::new(
                semaphore_mysql::MysqlStore::connect_with(
                    server.url(),
                    semaphore_mysql::MysqlOptions::default().table_prefix(namespace),
                )
                .await
                .map_err(|e| e.to_string())?,
            ),
            Server::Sqlite { db, .. } => {
                Arc::new(semaphore_sqlite::SqliteStore::open(db).map_err(|e| e.to_string())?)
            }
        };
        semaphore_sqlite::Pool::new(store, semaphore_sqlite::PoolId::from_name(pool))
            .register(count)
            .await
            .map_err(|e| e.to_string())?;
        Ok(())
    }

    /// Restarts the server with its testing module; on a cluster, fails a
    /// master over to its replica instead (the replica at `pick` among
    /// them). Blocking work, run on tokio's blocking pool.
    pub(crate) async fn restart(self: &Arc<Self>, pick: usize) -> Result<String, String> {
        let me = self.clone();
        let restarted = tokio::task::spawn_blocking(move || match &*me {
            Server::Postgres { server, .. } => {
                server.restart();
                Ok(String::new())
            }
            Server::Redis { server, .. } => {
                server.restart();
                Ok(String::new())
            }
            Server::RedisCluster {
                cluster,
                ports,
                shard,
            } => {
                // Two times in three, the pool's own shard.
                let shard = shard.get().filter(|_| !pick.is_multiple_of(3));
                let ports = shard.map_or(&ports[..], |pair| &pair[..]);
                fail_over(cluster, ports, pick / 3)
            }
            Server::Mysql { server, .. } => {
                server.restart();
                Ok(String::new())
            }
            Server::Sqlite { .. } => Ok(String::new()),
        });
        match timeout(Duration::from_secs(120), restarted).await {
            Ok(Ok(Ok(detail))) => Ok(detail),
            Ok(Ok(Err(e))) => Err(e),
            Ok(Err(e)) => Err(format!("the restart failed: {e}")),
            Err(_) => Err("the restart took more than 120 s".into()),
        }
    }

    /// Sets the server's idle-session timeout short (`on`), or back to its
    /// default.
    pub(crate) async fn idle_timeout(&self, on: bool) -> Result<String, String> {
        let bounded = timeout(ADMIN_BOUND, async {
            match self {
                Server::Postgres { server, .. } => {
                    let statement = if on {
                        "ALTER SYSTEM SET idle_session_timeout = '1s'"
                    } else {
                        "ALTER SYSTEM RESET idle_session_timeout"
                    };
                    pg_admin(server.url(), &[statement, "SELECT pg_reload_conf()"]).await?;
                    Ok(statement.to_string())
                }
                Server::Mysql { server, .. } => {
                    let statement = if on {
                        "SET GLOBAL wait_timeout = 2, GLOBAL interactive_timeout = 2"
                    } else {
                        "SET GLOBAL wait_timeout = DEFAULT, GLOBAL interactive_timeout = DEFAULT"
                    };
                    let mut conn = mysql_admin(server.url()).await?;
                    conn.query_drop(statement)
                        .await
                        .map_err(|e| e.to_string())?;
                    let _ = conn.disconnect().await;
                    Ok(statement.to_string())
                }
                Server::Redis { socket, .. } => {
                    let command = if on {
                        "CONFIG SET timeout 1"
                    } else {
                        "CONFIG SET timeout 0"
                    };
                    let answer = redis_command(socket, command).await?;
                    Ok(format!("{command}: {}", answer.trim()))
                }
                Server::RedisCluster { cluster, ports, .. } => {
                    let command = if on {
                        "CONFIG SET timeout 1"
                    } else {
                        "CONFIG SET timeout 0"
                    };
                    on_every_node(cluster, ports, command).await
                }
                Server::Sqlite { .. } => Ok(String::new()),
            }
        });
        bounded.await.unwrap_or_else(|_| Err("timed out".into()))
    }

    /// Kills client connections on the server: every one, or (PostgreSQL,
    /// which tells them apart by `application_name`) those of one slot.
    pub(crate) async fn kill_connections(&self, slot: Option<u32>) -> Result<String, String> {
        let bounded = timeout(ADMIN_BOUND, async {
            match self {
                Server::Postgres { server, .. } => {
                    let only = slot
                        .map(|s| format!(" AND application_name = 'faults-holder-{s}'"))
                        .unwrap_or_default();
                    let sql = format!(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                         WHERE backend_type = 'client backend' AND pid <> pg_backend_pid(){only}"
                    );
                    let answers = pg_admin(server.url(), &[&sql]).await?;
                    Ok(format!(
                        "pg_terminate_backend of {} backends{}",
                        answers.first().map_or("?", String::as_str),
                        slot.map(|s| format!(" of slot {s}")).unwrap_or_default()
                    ))
                }
                Server::Mysql { server, .. } => {
                    let mut conn = mysql_admin(server.url()).await?;
                    let ids: Vec<u64> = conn
                        .query(
                            "SELECT ID FROM information_schema.PROCESSLIST \
                             WHERE ID <> CONNECTION_ID() AND USER = 'root'",
                        )
                        .await
                        .map_err(|e| e.to_string())?;
                    let mut killed = 0;
                    for id in &ids {
                        // One may have ended meanwhile: not an error here.
                        if conn
                            .query_drop(format!("KILL CONNECTION {id}"))
                            .await
                            .is_ok()
                        {
                            killed += 1;
                        }
                    }
                    let _ = conn.disconnect().await;
                    Ok(format!(
                        "KILL CONNECTION of {killed} of {} connections",
                        ids.len()
                    ))
                }
                Server::Redis { socket, .. } => {
                    let answer = redis_command(socket, "CLIENT KILL TYPE normal").await?;
                    Ok(format!("CLIENT KILL TYPE normal: {}", answer.trim()))
                }
                Server::RedisCluster { cluster, ports, .. } => {
                    on_every_node(cluster, ports, "CLIENT KILL TYPE normal").await
                }
                Server::Sqlite { .. } => Ok(String::new()),
            }
        });
        bounded.await.unwrap_or_else(|_| Err("timed out".into()))
    }

    /// SQLite: deletes every side file and directory the store keeps
    /// besides the database, `-wal` and `-shm`: `<db>-holders/` (the
    /// holders' lock files), `<db>-semaphore-writer` and
    /// `<db>-semaphore-turnstile` (the writers' queue).
    pub(crate) fn delete_sidecars(&self) -> Result<String, String> {
        let Server::Sqlite { db, .. } = self else {
            return Ok(String::new());
        };
        let side = |suffix: &str| {
            let mut p = db.as_os_str().to_owned();
            p.push(suffix);
            PathBuf::from(p)
        };
        let mut removed = Vec::new();
        let holders = side("-holders");
        if std::fs::remove_dir_all(&holders).is_ok() {
            removed.push("-holders/".to_string());
        }
        for suffix in ["-semaphore-writer", "-semaphore-turnstile"] {
            if std::fs::remove_file(side(suffix)).is_ok() {
                removed.push(suffix.to_string());
            }
        }
        Ok(format!("removed {}", removed.join(" ")))
    }
}

/// Runs `statements` on a fresh connection of its own (an idle-session
/// timeout would end a kept one), each as a simple query; the first
/// column of the first row of each.
async fn pg_admin(url: &str, statements: &[&str]) -> Result<Vec<String>, String> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(|e| e.to_string())?;
    let driver = tokio::spawn(connection);
    let mut answers = Vec::new();
    for statement in statements {
        let messages = client
            .simple_query(statement)
            .await
            .map_err(|e| format!("{statement}: {e}"))?;
        let first = messages.iter().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_string),
            _ => None,
        });
        answers.push(first.unwrap_or_default());
    }
    drop(client);
    let _ = driver.await;
    Ok(answers)
}

async fn mysql_admin(url: &str) -> Result<mysql_async::Conn, String> {
    let opts = mysql_async::Opts::from_url(url).map_err(|e| e.to_string())?;
    mysql_async::Conn::new(opts)
        .await
        .map_err(|e| e.to_string())
}

impl Server {
    /// A cluster: the ports of the pool's shard (see
    /// [`Server::RedisCluster`]), once the pool is registered.
    pub fn pool_shard(&self) -> Option<[u16; 2]> {
        match self {
            Server::RedisCluster { shard, .. } => shard.get().copied(),
            _ => None,
        }
    }

    /// A cluster: sends `signal` (`STOP`, `CONT`) to the node on `port`.
    pub(crate) fn signal_node(&self, port: u16, signal: &str) -> Result<String, String> {
        match self {
            Server::RedisCluster { cluster, .. } => {
                cluster.signal(port, signal);
                Ok(format!("SIG{signal} of node {port}"))
            }
            _ => Err("not a cluster".into()),
        }
    }

    /// A cluster: the master's port among `ports` now, if one is.
    pub(crate) fn master_among(&self, ports: &[u16]) -> Option<u16> {
        match self {
            Server::RedisCluster { cluster, .. } => {
                ports.iter().copied().find(|port| cluster.is_master(*port))
            }
            _ => None,
        }
    }
}

/// `command` on every node of `cluster` (at `ports`), on tokio's blocking
/// pool: what each answered, or the first error.
async fn on_every_node(
    cluster: &Arc<TestCluster>,
    ports: &[u16],
    command: &'static str,
) -> Result<String, String> {
    let (cluster, ports) = (cluster.clone(), ports.to_vec());
    let answers = tokio::task::spawn_blocking(move || {
        ports
            .iter()
            .map(|port| (*port, cluster.command(*port, command)))
            .collect::<Vec<_>>()
    })
    .await
    .map_err(|e| e.to_string())?;
    let mut said = Vec::new();
    for (port, answer) in answers {
        if answer.starts_with('-') {
            return Err(format!("{command} on node {port}: {}", answer.trim()));
        }
        said.push(format!("{port}: {}", answer.trim()));
    }
    Ok(format!("{command} on every node ({})", said.join(", ")))
}

/// Fails a master of `cluster` over to its replica: `CLUSTER FAILOVER
/// FORCE` on the replica at `pick` among the nodes at `ports` that are
/// replicas now (without the master's agreement, so that writes the
/// replica had not received are lost, as when a master dies), then waits
/// until it serves as a master and every node says the cluster is ok.
fn fail_over(cluster: &TestCluster, ports: &[u16], pick: usize) -> Result<String, String> {
    let replicas: Vec<u16> = ports
        .iter()
        .copied()
        .filter(|port| !cluster.is_master(*port))
        .collect();
    let Some(&replica) = replicas.get(pick % replicas.len().max(1)) else {
        return Err("no replica to fail over to".into());
    };
    let answer = cluster.command(replica, "CLUSTER FAILOVER FORCE");
    if answer.starts_with('-') {
        return Err(format!(
            "CLUSTER FAILOVER FORCE on {replica}: {}",
            answer.trim()
        ));
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !cluster.is_master(replica)
        || ports.iter().any(|port| {
            !cluster
                .command(*port, "CLUSTER INFO")
                .contains("cluster_state:ok")
        })
    {
        if std::time::Instant::now() > deadline {
            return Err(format!(
                "replica {replica} was not a master of an ok cluster within 30 s"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(format!("CLUSTER FAILOVER FORCE on replica {replica}"))
}

/// One inline command to Redis on its unix socket; the first reply as
/// read.
async fn redis_command(socket: &Path, command: &str) -> Result<String, String> {
    let mut stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|e| e.to_string())?;
    stream
        .write_all(format!("{command}\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 4096];
    let n = stream.read(&mut buf).await.map_err(|e| e.to_string())?;
    let answer = String::from_utf8_lossy(&buf[..n]).into_owned();
    if answer.starts_with('-') {
        return Err(format!("{command}: {}", answer.trim()));
    }
    Ok(answer)
}
