//! Redis errors as the core's [`Error::Storage`], with the right
//! `retryable` flag.

use semaphore_core::Error;

/// A `redis` error as a storage error of `operation`.
///
/// Retryable: the connection refused, dropped or timed out (on a cluster,
/// no connection to the node found), the server's transient states
/// (`LOADING`, `BUSY`, `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`,
/// `NOREPLICAS`), and a cluster's redirections that redis-rs's own retries
/// did not outlast while its nodes agree on a failover (`MOVED`, `ASK`, and
/// `READONLY` from a master just demoted). Not retryable: `OOM` (the server
/// is out of memory: free memory or raise `maxmemory`; the script was
/// refused whole, so nothing was
/// written), `CROSSSLOT` (a multi-pool borrow across cluster slots, behind
/// a cluster proxy), anything else the server refused, and a reply of the
/// wrong shape.
pub(crate) fn storage(operation: &'static str) -> impl Fn(redis::RedisError) -> Error {
    move |e| {
        let transient = matches!(
            e.code(),
            Some(
                "LOADING"
                    | "BUSY"
                    | "TRYAGAIN"
                    | "CLUSTERDOWN"
                    | "MASTERDOWN"
                    | "NOREPLICAS"
                    | "MOVED"
                    | "ASK"
                    | "READONLY"
            )
        );
        let retryable = transient
            || e.kind() == redis::ErrorKind::ClusterConnectionNotFound
            || e.is_io_error()
            || e.is_timeout()
            || e.is_connection_dropped()
            || e.is_connection_refusal();
        let source: semaphore_core::BoxError = match e.code() {
            Some("OOM") => format!(
                "the Redis server is out of memory (maxmemory reached), so nothing was \
                 written: free memory or raise maxmemory ({e})"
            )
            .into(),
            Some("CROSSSLOT") => format!(
                "the pools of this multi-pool borrow live in different cluster slots, and a \
                 Redis Cluster runs a script on one slot only: borrow from one pool at a \
                 time, or use a single Redis server ({e})"
            )
            .into(),
            _ => Box::new(e),
        };
        Error::Storage {
            operation,
            retryable,
            source,
        }
    }
}

/// A reply of a shape the scripts never give: the store's keys were
/// written by something else, or by another version.
pub(crate) fn malformed(operation: &'static str, what: &str) -> Error {
    Error::Storage {
        operation,
        retryable: false,
        source: format!(
            "the Redis server answered {operation} with {what}: are the store's keys written \
             by another program or version? (use another prefix)"
        )
        .into(),
    }
}
