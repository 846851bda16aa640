//! `semaphore serve`'s arguments: where it keeps its pools, and its limits.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Arg, Args};

use super::{StoreArgs, duration};

/// Where `serve` keeps its pools, and its limits.
#[derive(Debug, Args)]
#[command(mut_args(store_help))]
pub(crate) struct ServeArgs {
    /// The address to listen on; port 0 picks a free port (the address is
    /// printed on the first line of standard output).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub(crate) listen: SocketAddr,

    /// Host names this server also answers to (repeatable, or
    /// comma-separated), besides localhost, 127.0.0.1, ::1 and the
    /// --listen address (every IP address when listening on 0.0.0.0 or
    /// ::). A request for any other host is answered 421: a web page
    /// whose name was rebound to this machine's address must not read
    /// its pools (DNS rebinding). .example.com allows example.com and every
    /// name under it; * allows every host. The port is never checked.
    /// Behind a proxy that passes the client's Host on, list the names
    /// clients use; one that sends its upstream's address (nginx's
    /// default) needs none.
    #[arg(long, value_name = "HOST,...", value_delimiter = ',',
        value_parser = crate::hosts::parse_allowed)]
    pub(crate) allowed_host: Vec<crate::hosts::Allowed>,

    /// A file holding a bearer token (16 to 4096 visible ASCII characters):
    /// every request but /healthz and /readyz must then send
    /// `Authorization: Bearer <token>`, else 401. Off by default, when the
    /// pool UUID is the only secret.
    #[arg(long, value_name = "FILE")]
    pub(crate) auth_token_file: Option<PathBuf>,

    #[command(flatten)]
    pub(crate) store: StoreArgs,

    /// Keep pools in this process's memory only (lost on exit).
    #[arg(long, conflicts_with_all = ["sqlite", "postgres", "redis", "redis_cluster", "mysql", "etcd"])]
    pub(crate) memory: bool,

    /// The longest lease; longer ttls are clamped to it (e.g. 24h, 90s).
    #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = duration)]
    pub(crate) max_ttl: Duration,

    /// The longest a borrow waits; longer waits are clamped to it. The
    /// default stays under common proxies' 60 s read timeout.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration)]
    pub(crate) max_wait: Duration,

    /// How long a two-phase borrow's ticket (`/enqueue`) keeps its place
    /// after a poll (`/wait`) ends; a ticket not polled again within it is
    /// dropped. On a shared store the store keeps the place, and every
    /// server sharing it should use the same hold.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration)]
    pub(crate) ticket_hold: Duration,

    /// The most connections served at once; more wait to be accepted
    /// until one closes.
    #[arg(long, value_name = "N", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_connections: u32,

    /// The longest a client may take to send a request's head (the request
    /// line and headers); its connection is closed after that.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration)]
    pub(crate) header_timeout: Duration,

    /// The longest a client may take to send a request's body, from the
    /// end of its head; it is answered 408 and its connection closed after
    /// that.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration)]
    pub(crate) body_timeout: Duration,

    /// The most requests whose body did not come whole with their head
    /// that are waited for at once (default: a quarter of
    /// --max-connections), at most half of them from one client address.
    /// More are answered 503 too_many_slow_bodies and closed at once, so
    /// that clients sending bodies slowly cannot hold every connection; a
    /// body that comes with its head never waits for a place.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_pending_bodies: Option<u32>,

    /// The most connections served at once from one client address
    /// (default: a quarter of --max-connections). More from that address
    /// are closed at once, so that one client cannot hold every connection
    /// (with heads it never finishes, long polls, or answers it never
    /// reads). Behind a proxy or a NAT every client has the proxy's
    /// address: raise it there, up to --max-connections.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_connections_per_address: Option<u32>,

    /// The longest the server waits for a client to read its answer: a
    /// write that makes no progress for this long (the client stopped
    /// reading) closes the connection. A client that reads, however
    /// slowly, is never cut off.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration)]
    pub(crate) write_timeout: Duration,

    /// The largest count a pool may be registered with.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub(crate) max_count: u32,

    /// Names a pool for /metrics (repeatable; one name per pool): its
    /// series and gauges are labelled pool="NAME". Other pools share
    /// unlabelled series, since a pool's UUID is its bearer secret and
    /// never appears in metrics.
    #[arg(long, value_name = "NAME=UUID", value_parser = alias)]
    pub(crate) alias: Vec<(String, uuid::Uuid)>,
}

/// `serve`'s help for the [`StoreArgs`] flags that name a store: a store
/// there is one every server on it shares, and `--memory` is one more
/// choice. Every other argument is returned as it is.
fn store_help(arg: Arg) -> Arg {
    let help = match arg.get_id().as_str() {
        "sqlite" => {
            "A SQLite file shared with every process on this machine. Without \
             --sqlite, --postgres, --redis, --mysql, --etcd or --memory: \
             $SEMAPHORE_PG_URL, $SEMAPHORE_REDIS_URL, $SEMAPHORE_MYSQL_URL, \
             $SEMAPHORE_ETCD_URL or $SEMAPHORE_DB, else semaphore.db in the user's data directory, the \
             same default as every other subcommand. A flag always wins over the \
             environment"
        }
        "postgres" => {
            "A PostgreSQL connection string: every server on the database serves \
             the same pools"
        }
        "postgres_schema" => "The PostgreSQL schema for the store's tables",
        "redis" => "A Redis URL (redis://host:port/db): every server on it serves the same pools",
        "redis_cluster" => {
            "A Redis Cluster: some or all of its nodes' URLs, comma-separated \
             (redis://host:port,redis://host:port); every server on it serves \
             the same pools"
        }
        "mysql" => {
            "A MySQL or MariaDB URL (mysql://user:password@host:port/database): \
             every server on it serves the same pools. MySQL has no \
             notifications: a return on another server rings this one's waiting \
             head through the database (KILL QUERY of the connection it waits \
             on); what no ring tells (a return by another MySQL user, a lease \
             that expired) is seen at the next poll (every 100 ms), so such a \
             wake-up takes up to 100 ms plus the poll's round trip to the database"
        }
        "etcd" => {
            "An etcd cluster: some or all of its members' client URLs, \
             comma-separated (http://host:2379,...); every server on it serves the \
             same pools. etcd ends leases by its own leases, in whole seconds: a \
             lease's slot frees 0.5-1.5 s after its ttl (its holder is told at the \
             ttl), or after etcd's minimum lease TTL (2 s by default)"
        }
        _ => return arg,
    };
    arg.help(help)
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
