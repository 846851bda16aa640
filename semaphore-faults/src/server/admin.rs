//! The server-side faults (an idle-session timeout, connection kills,
//! SQLite's side files), and the statements and commands they send, each
//! on a connection of its own.

use std::path::{Path, PathBuf};
use std::time::Duration;

use semaphore_mysql::mysql_async::prelude::Queryable;
use tokio::time::timeout;

use super::Server;
use super::cluster::on_every_node;

/// How long a server-side fault's statement may take.
const ADMIN_BOUND: Duration = Duration::from_secs(15);

impl Server {
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
                // etcd has no idle-session timeout (the nemesis does not
                // pick it there).
                Server::Etcd { .. } | Server::Sqlite { .. } => Ok(String::new()),
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
                // etcd cannot be told to drop its clients (the nemesis
                // does not pick it there: the proxies' cuts do that).
                Server::Etcd { .. } | Server::Sqlite { .. } => Ok(String::new()),
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

use semaphore_mysql::mysql_async;
use semaphore_postgres::tokio_postgres;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Runs `statements` on a fresh connection of its own (an idle-session
/// timeout would end a kept one), each as a simple query; the first
/// column of the first row of each.
pub(super) async fn pg_admin(url: &str, statements: &[&str]) -> Result<Vec<String>, String> {
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

pub(super) async fn mysql_admin(url: &str) -> Result<mysql_async::Conn, String> {
    let opts = mysql_async::Opts::from_url(url).map_err(|e| e.to_string())?;
    mysql_async::Conn::new(opts)
        .await
        .map_err(|e| e.to_string())
}

/// One inline command to Redis on its unix socket; the first reply as
/// read.
pub(super) async fn redis_command(socket: &Path, command: &str) -> Result<String, String> {
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
