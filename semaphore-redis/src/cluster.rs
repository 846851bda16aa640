//! Redis Cluster: connecting, and waking waiters through sharded pub/sub.
//!
//! Each hash slot has a wake-up channel of its own,
//! `PREFIX:{<slot's tag>}:wake`, which the scripts `SPUBLISH` to (the pool's
//! id) on the node that serves the slot: a message crosses no other node.
//! A store `SSUBSCRIBE`s to a slot's channel before its first waiting
//! borrow there, on a RESP3 cluster connection of its own, which redis-rs
//! subscribes again after a reconnect or a failover; every waiter looks
//! again then, and a fallback poll covers what is lost meanwhile.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterClientBuilder, NodeAddress};
use redis::cluster_async::ClusterConnection;
use redis::{ProtocolVersion, PushInfo, PushKind};
use semaphore_core::store::Changes;
use semaphore_core::{Error, Result};
use tokio::sync::mpsc;
use tokio::sync::oneshot;

use crate::RedisOptions;
use crate::error::storage;
use crate::slots::Place;

/// A cluster client on `urls` (any of the cluster's nodes: the rest are
/// learned from them) whose calls give up after `timeout`, dialling each
/// node at `addresses`' mapping of the address it announces, if any.
///
/// # Errors
/// [`Error::InvalidArgument`] naming `urls` if there is none or one does
/// not parse, or naming `node_address` for a mapping that does not parse.
pub(crate) fn client(
    urls: &[String],
    timeout: Duration,
    addresses: &[(String, String)],
    push: Option<mpsc::UnboundedSender<PushInfo>>,
) -> Result<ClusterClient> {
    if urls.is_empty() {
        return Err(invalid_urls("none".into()));
    }
    let mut builder = ClusterClientBuilder::new(urls.iter().map(String::as_str))
        .connection_timeout(timeout)
        .response_timeout(timeout)
        .retries(3);
    if !addresses.is_empty() {
        builder = builder.node_address_map(address_map(addresses)?);
    }
    if let Some(push) = push {
        builder = builder
            .use_protocol(ProtocolVersion::RESP3)
            .push_sender(push);
    }
    builder
        .build()
        .map_err(|e| invalid_urls(format!("{urls:?}, which do not parse: {e}")))
}

/// `addresses` as redis-rs maps them.
///
/// # Errors
/// [`Error::InvalidArgument`] naming `node_address` for one that is not a
/// `host:port`.
fn address_map(addresses: &[(String, String)]) -> Result<HashMap<NodeAddress, NodeAddress>> {
    let parse = |address: &str| {
        address
            .parse::<NodeAddress>()
            .map_err(|e| Error::InvalidArgument {
                field: "node_address",
                allowed: "a host:port, such as 127.0.0.1:6379".into(),
                got: format!("{address:?} ({e})"),
            })
    };
    addresses
        .iter()
        .map(|(announced, dial)| Ok((parse(announced)?, parse(dial)?)))
        .collect()
}

fn invalid_urls(got: String) -> Error {
    Error::InvalidArgument {
        field: "urls",
        allowed: "one or more Redis URLs of the cluster's nodes (redis://host:port)".into(),
        got,
    }
}

/// The slots this store listens to, and the connection it listens on.
pub(crate) struct Listener {
    prefix: String,
    connection: tokio::sync::Mutex<ClusterConnection>,
    slots: Mutex<HashSet<u16>>,
    _stop: oneshot::Sender<()>,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("prefix", &self.prefix)
            .field("slots", &self.slots)
            .finish_non_exhaustive()
    }
}

impl Listener {
    /// Connects the listening connection (with `options`' timeout and node
    /// addresses) and starts the task that hands its messages to
    /// `changes`, with a fallback poll every `options`' poll interval, and
    /// refreshes the view of the server's clock every minute.
    ///
    /// # Errors
    /// [`Error::Storage`] if the cluster cannot be reached.
    pub(crate) async fn start(
        urls: &[String],
        options: &RedisOptions,
        changes: Arc<Changes>,
        ends: crate::subscribe::Ends,
        clock: Clock,
    ) -> Result<Self> {
        let (push, messages) = mpsc::unbounded_channel();
        let timeout = options.response_timeout;
        let connection = client(urls, timeout, &options.node_addresses, Some(push))?
            .get_async_connection()
            .await
            .map_err(storage("connect"))?;
        let (stop, stopped) = oneshot::channel();
        let poll = options.poll_interval;
        tokio::spawn(run(messages, changes, ends, poll, clock, stopped));
        Ok(Self {
            prefix: options.prefix.clone(),
            connection: tokio::sync::Mutex::new(connection),
            slots: Mutex::new(HashSet::new()),
            _stop: stop,
        })
    }

    /// Listens to hash slot `slot`'s channel from now on (once per slot).
    ///
    /// # Errors
    /// [`Error::Storage`] if the node did not confirm.
    pub(crate) async fn listen(&self, slot: u16) -> Result<()> {
        let listening = |slots: &Mutex<HashSet<u16>>| {
            slots
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contains(&slot)
        };
        if listening(&self.slots) {
            return Ok(());
        }
        let channel = Place::slot(&self.prefix, slot).channel;
        self.connection
            .lock()
            .await
            .ssubscribe(&channel)
            .await
            .map_err(storage("subscribe"))?;
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(slot);
        Ok(())
    }
}

/// What refreshes the view of the server's clock: the store's connection
/// and its deciding clock.
pub(crate) type Clock = (crate::Connection, semaphore_core::store::DecidingClock);

/// Waiter liveness on a cluster (a waiter's place may be
/// bound to its connection): a queued head's place names the client id,
/// on the master of the pool's slot, of the store's own cluster link to
/// that master, which dies with the process. Learned with `CLIENT ID`
/// sent to the slot's master (one round trip, once per slot) and
/// forgotten when a call fails on a lost connection (the link's next id
/// is another: a place queued under the old one is judged gone, and its
/// waiter loses that place, never a slot).
#[derive(Debug, Default)]
pub(crate) struct Links {
    ids: Mutex<std::collections::HashMap<u16, i64>>,
}

impl Links {
    /// The id known for slot `slot`.
    pub(crate) fn get(&self, slot: u16) -> Option<i64> {
        self.ids
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&slot)
            .copied()
    }

    /// Learns the id of `connection`'s link to the master of `slot`, if
    /// not known; a failure leaves it unknown (the place is then kept by
    /// its heartbeat alone).
    pub(crate) async fn learn(&self, connection: &crate::Connection, slot: u16) {
        if self.get(slot).is_some() {
            return;
        }
        let mut id = redis::cmd("CLIENT");
        id.arg("ID");
        if let Ok(redis::Value::Int(id)) = connection.on_slot(id, slot).await {
            self.ids
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(slot, id);
        }
    }

    /// Forgets every id (a connection was lost).
    pub(crate) fn forget(&self) {
        self.ids
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }
}

async fn run(
    messages: mpsc::UnboundedReceiver<PushInfo>,
    changes: Arc<Changes>,
    ends: crate::subscribe::Ends,
    poll: Duration,
    (connection, time): Clock,
    stopped: oneshot::Receiver<()>,
) {
    let messages = tokio::sync::Mutex::new(messages);
    let follow = semaphore_core::store::follow(&changes, poll, || async {
        let mut messages = messages.lock().await;
        let mut refresh = tokio::time::interval(crate::subscribe::CLOCK_REFRESH);
        refresh.reset();
        loop {
            tokio::select! {
                push = messages.recv() => match push {
                    Some(push) => dispatch(&changes, &ends, push),
                    // The store is gone: nothing more will come.
                    None => std::future::pending::<()>().await,
                },
                _ = refresh.tick() => {
                    if let Some(view) = time.server() {
                        // A failed reading keeps the last offset.
                        let _ = crate::subscribe::measure(&mut connection.clone(), view).await;
                    }
                }
            }
        }
    });
    tokio::select! {
        _ = stopped => {}
        () = follow => {}
    }
}

/// Hands a message on to the waiters of its pool; after a subscription
/// made again (a reconnect, a failover) or a lost connection, every waiter
/// looks again.
fn dispatch(changes: &Changes, ends: &crate::subscribe::Ends, push: PushInfo) {
    match push.kind {
        PushKind::SMessage | PushKind::Message => match push.data.get(1) {
            Some(redis::Value::BulkString(payload)) => {
                crate::subscribe::dispatch(changes, ends, None, payload);
            }
            _ => changes.notify_all(),
        },
        PushKind::SSubscribe | PushKind::Disconnection => changes.notify_all(),
        _ => {}
    }
}
