//! The command line (clap).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

/// Numbered-slot semaphores with leases: a pool has `count` slots; a borrow
/// hands out the lowest free one as a lease with a ttl.
#[derive(Debug, Parser)]
#[command(name = "semaphore", version, about)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Serve the HTTP API (PUT/GET/DELETE /l/{id}, POST /l/{id}/borrow,
    /// /return, /renew) over a store.
    Serve(ServeArgs),
}

/// Where `serve` keeps its pools, and its limits.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The address to listen on; port 0 picks a free port (the address is
    /// printed on the first line of standard output).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub(crate) listen: SocketAddr,

    /// A SQLite file shared with every process on this machine (the
    /// default store: ./semaphore.db).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["postgres", "memory"])]
    pub(crate) sqlite: Option<PathBuf>,

    /// A PostgreSQL connection string: every server on the database serves
    /// the same pools.
    #[arg(
        long,
        value_name = "URL",
        env = "SEMAPHORE_PG_URL",
        conflicts_with = "memory"
    )]
    pub(crate) postgres: Option<String>,

    /// The PostgreSQL schema for the store's tables.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "public",
        requires = "postgres"
    )]
    pub(crate) postgres_schema: String,

    /// Keep pools in this process's memory only (lost on exit).
    #[arg(long)]
    pub(crate) memory: bool,

    /// The longest lease; longer ttls are clamped to it (e.g. 24h, 90s).
    #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = duration)]
    pub(crate) max_ttl: Duration,

    /// The longest a borrow waits; longer waits are clamped to it. The
    /// default stays under common proxies' 60 s read timeout.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration)]
    pub(crate) max_wait: Duration,

    /// The largest count a pool may be registered with.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub(crate) max_count: u32,

    /// Names a pool for /metrics (repeatable): its gauges are exported
    /// under NAME. Pools without an alias get none, since a pool's UUID is
    /// its bearer secret and never appears in metrics.
    #[arg(long, value_name = "NAME=UUID", value_parser = alias)]
    pub(crate) alias: Vec<(String, uuid::Uuid)>,
}

fn alias(text: &str) -> Result<(String, uuid::Uuid), String> {
    let (name, id) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not NAME=UUID"))?;
    let printable = |c: char| c.is_ascii_alphanumeric() || "-_.:".contains(c);
    if name.is_empty() || !name.chars().all(printable) {
        return Err(format!(
            "alias {name:?} must be 1 or more of a-z, A-Z, 0-9, -_.:"
        ));
    }
    let id = uuid::Uuid::parse_str(id).map_err(|e| format!("{id:?} is not a UUID: {e}"))?;
    Ok((name.to_string(), id))
}

fn duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("{e} (write e.g. 30s, 5m, 1h30m)"))
}
