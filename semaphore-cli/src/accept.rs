//! `semaphore serve`'s accept loop: hyper's HTTP/1
//! server with a deadline on reading each request's head and a cap on open
//! connections, which `axum::serve` does not expose.
//!
//! - A client must send a whole request head within `header_timeout`
//!   (hyper's `header_read_timeout`), or its connection is closed: half-sent
//!   requests cannot hold connections open.
//! - At most `connections` connections are served at once; past that, new
//!   ones wait in the kernel's accept queue until one closes.
//! - At most `per_address` of them come from one client address (a
//!   quarter of `connections` by default); more from it are closed at
//!   once, so that one client cannot take every connection, whatever it
//!   holds them with: heads it never finishes, long polls, answers it
//!   never reads (behind a proxy every client has the proxy's address:
//!   raise it there).
//! - An answer that the client does not read makes no progress for at most
//!   `write_timeout` ([`WriteDeadline`]); the connection is then closed.
//! - A request's body has a deadline too (`--body-timeout`, see
//!   [`body_deadline`](crate::body_deadline)).
//! - Every socket goes through [`JsonErrors`],
//!   so that hyper's own answers to unparsable requests carry the JSON body.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower_http::add_extension::AddExtension;

use crate::body_deadline::PeerAddr;
use crate::parse_errors::JsonErrors;
use crate::write_deadline::WriteDeadline;

/// The connection limits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Connections served at once.
    pub(crate) connections: usize,
    /// The longest a request head may take to arrive.
    pub(crate) header_timeout: Duration,
    /// Connections served at once from one client address.
    pub(crate) per_address: usize,
    /// The longest a write of an answer may wait for the client to read.
    pub(crate) write_timeout: Duration,
}

/// The connections open from each client address, for
/// [`Limits::per_address`].
#[derive(Default)]
struct PerAddress(parking_lot::Mutex<HashMap<IpAddr, usize>>);

impl PerAddress {
    /// Counts one more connection from `address`, unless it has `cap`.
    fn open(self: &Arc<Self>, address: IpAddr, cap: usize) -> Option<AddressSlot> {
        let mut open = self.0.lock();
        let n = open.entry(address).or_default();
        if *n >= cap {
            return None;
        }
        *n += 1;
        Some(AddressSlot {
            table: self.clone(),
            address,
        })
    }
}

/// One open connection from an address; counted until dropped.
struct AddressSlot {
    table: Arc<PerAddress>,
    address: IpAddr,
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut open = self.table.0.lock();
        if let Some(n) = open.get_mut(&self.address) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.address);
            }
        }
    }
}

/// Accepts and serves connections until the future is dropped; dropping it
/// also drops every connection it serves. Fails only if accepting fails for
/// good.
pub(crate) async fn serve(
    listener: TcpListener,
    router: axum::Router,
    limits: Limits,
) -> std::io::Result<()> {
    let open = Arc::new(Semaphore::new(limits.connections.max(1)));
    let per_address = Arc::new(PerAddress::default());
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let Ok(permit) = open.clone().acquire_owned().await else {
            return Ok(());
        };
        // Reap the tasks of closed connections as we go.
        while connections.try_join_next().is_some() {}
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) if is_per_connection(&e) => continue,
            Err(e) => {
                // Out of file descriptors and the like: pause, then go on.
                eprintln!("semaphore serve: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(address_slot) = per_address.open(peer.ip(), limits.per_address) else {
            // Over its share: closed at once (dropped).
            continue;
        };
        // The client's address, in each request's extensions (for the
        // per-address share of slow bodies).
        let service =
            TowerToHyperService::new(AddExtension::new(router.clone(), PeerAddr(peer.ip())));
        let stream = WriteDeadline::new(JsonErrors::new(stream), limits.write_timeout);
        let connection = http.serve_connection(TokioIo::new(stream), service);
        connections.spawn(async move {
            let _ = connection.await;
            drop(address_slot);
            drop(permit);
        });
    }
}

/// Errors of one connection, not of the listener.
fn is_per_connection(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}
