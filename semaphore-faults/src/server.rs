//! The throwaway servers of the store crates' `testing` modules, as the
//! orchestrator uses them: where a proxy forwards, what URL a holder gets,
//! and the server-side faults (restart, idle-session timeout, connection
//! kills; SQLite's side files).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::timeout;

mod admin;
mod cluster;
mod etcd;

pub use etcd::Audit;

use crate::proxy::{Proxies, Proxy, Upstream};
use cluster::fail_over;
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
    /// `semaphore-etcd`, on a throwaway one-member etcd.
    Etcd,
    /// `semaphore-etcd` on a throwaway three-member etcd cluster, each
    /// holder through a proxy per member.
    EtcdCluster,
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
            StoreKind::Etcd => "etcd",
            StoreKind::EtcdCluster => "etcd-cluster",
        }
    }

    /// Whether holders reach it over the network (through proxies).
    pub fn networked(self) -> bool {
        self != StoreKind::Sqlite
    }

    /// Whether it is etcd (one member or three).
    pub fn etcd(self) -> bool {
        matches!(self, StoreKind::Etcd | StoreKind::EtcdCluster)
    }
}

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
    /// A throwaway etcd cluster (one member or three).
    Etcd {
        /// The cluster.
        cluster: Arc<semaphore_etcd::testing::TestCluster>,
        /// Its members' client ports on `127.0.0.1`, where proxies
        /// forward.
        ports: Vec<u16>,
        /// Of three members, the proxy each one's peers reach it through,
        /// in member order.
        peers: Vec<crate::proxy::Proxy>,
        /// The `etcdctl watch` of `SEMAPHORE_FAULTS_ETCD_AUDIT`, if asked.
        _audit: Option<Audit>,
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
            StoreKind::Etcd | StoreKind::EtcdCluster => etcd::start(kind)?,
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

    /// Whether it is etcd.
    pub fn etcd(&self) -> bool {
        matches!(self, Server::Etcd { .. })
    }

    /// The server's own URL (unix socket), or the SQLite file's path.
    pub fn url(&self) -> String {
        match self {
            Server::Postgres { server, .. } => server.url().to_string(),
            Server::Redis { server, .. } => server.url().to_string(),
            Server::RedisCluster { cluster, .. } => cluster.urls().join(","),
            Server::Mysql { server, .. } => server.url().to_string(),
            Server::Etcd { cluster, .. } => cluster.endpoints().join(","),
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
            Server::Etcd { ports, .. } if ports.len() == 1 => {
                Some(Upstream::Tcp(([127, 0, 0, 1], ports[0]).into()))
            }
            Server::RedisCluster { .. } | Server::Etcd { .. } | Server::Sqlite { .. } => None,
        }
    }

    /// Where a holder's proxies forward: the server, or each node of a
    /// cluster; none for SQLite.
    pub fn upstreams(&self) -> Vec<Upstream> {
        match self {
            Server::RedisCluster { ports, .. } | Server::Etcd { ports, .. } => ports
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
            Server::Etcd { .. } => semaphore_etcd::testing::TestCluster::fresh_prefix(),
            Server::Sqlite { .. } => "-".into(),
        }
    }

    /// The arguments that tell a holder in `slot` how to reach the store
    /// through `proxies` (`None`: SQLite): `--url`, and PostgreSQL's
    /// `--listen-url` or a cluster's `--node-map` (each node's address, as
    /// it announces it, to the proxy's).
    pub fn holder_args(&self, proxies: Option<&Proxies>, slot: u32) -> Vec<String> {
        if let Server::Etcd { .. } = self {
            let urls: Vec<String> = proxies
                .into_iter()
                .flat_map(Proxies::each)
                .map(|(_, proxy)| format!("http://{}", proxy.addr()))
                .collect();
            return vec!["--url".into(), urls.join(",")];
        }
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
            Server::Etcd { .. } => (format!("http://127.0.0.1:{port}"), None),
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
            Server::Etcd { cluster, .. } => Arc::new(
                semaphore_etcd::EtcdStore::connect_with(
                    cluster.endpoints(),
                    semaphore_etcd::EtcdOptions::default().prefix(namespace),
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
            // A member killed and started again: of three, the leader
            // every other time.
            Server::Etcd { cluster, ports, .. } => {
                let member = match cluster.leader() {
                    Some(leader) if pick.is_multiple_of(2) => leader,
                    _ => pick % ports.len(),
                };
                let role = if cluster.leader() == Some(member) {
                    "the leader"
                } else {
                    "a follower"
                };
                cluster.restart(member);
                Ok(format!("member {member} ({role}) killed and started again"))
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
}
