//! [`EtcdStore`]: one etcd cluster shared by processes on many machines.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, PutOptions, Txn, TxnOp, TxnResponse,
};
use semaphore_core::store::{Changes, DecidingClock, ForkCheck, bounded, check_prefix, unix_ms};
use semaphore_core::{Error, PoolId, Result, Session};

use crate::EtcdOptions;
use crate::error::storage;
use crate::record::Keys;
use crate::session::Beats;
use crate::view::{Look, PoolView, parse, read_txn, reads};

/// How often a transaction that never left (its connection was refused)
/// is sent again before its error is the caller's.
const NOT_SENT_TRIES: u64 = 5;

/// How long `connect` waits for the store's session to open.
const SESSION_WAIT: Duration = Duration::from_secs(2);

/// What a conditioned write found ([`EtcdStore::commit_or_look`]).
pub(crate) enum Written {
    /// It was written, at this revision.
    At(i64),
    /// Another writer came first: the pools as they are now.
    Changed(Vec<PoolView>, Look),
}

/// A [`Store`](semaphore_core::store::Store) in one etcd cluster (v3 API,
/// etcd 3.4 or later), shared by any number of processes on any number of
/// machines (rule "Stores", rule "etcd").
///
/// - **etcd decides.** Each primitive is one look (a read-only
///   transaction: one revision, one instant) and at most one write: a
///   transaction conditioned on the pool's keys being as the look saw them
///   (`mod_revision` compares over the pool's key ranges), tried again
///   from a new look if another process got there first. Nothing is held
///   across an `.await`; a dropped call leaves nothing half done.
/// - **Expiry is an etcd lease's** (rule "etcd"): each lease's key is
///   attached to an etcd lease of its ttl plus at least 0.5 s, rounded up
///   to whole seconds (the granularity etcd grants in, [`Limits::expiry_granularity`](semaphore_core::Limits::expiry_granularity)),
///   which the leader revokes when it lapses; etcd may keep it longer
///   (its minimum TTL, a leader change), never shorter. The lease's
///   `expires_at` is counted from before the grant was sent, so the
///   holder's deadline (R17) ends first.
/// - **Fencing tokens are etcd revisions**: a lease's token is its key's
///   `create_revision` × 1024 (plus its place among the leases of a
///   multi-pool borrow, which one transaction writes at one revision); the
///   revision only grows across the whole cluster, across delete and
///   register again (R9).
/// - **Sessions are etcd leases** (R16), kept alive by the core's
///   heartbeat, each beat confirmed by a linearizable read in the raft
///   term its keep-alive was answered in; a bound lease is active only
///   while its session's key exists.
/// - **FIFO across processes** (R11): a queued borrower's place is a key
///   whose `create_revision` is its turn. A process's queued heads hang
///   theirs on one etcd lease of 4 s that the handle keeps alive every
///   1.5 s while any of its borrowers waits, so a dead or stopped
///   process's places go within 4 s; a held place's key lapses after its
///   hold.
/// - **etcd leases are shared** by the keys whose ends fall in the same
///   second (`grants`): a borrow is a look and a write, not a grant
///   besides; none is revoked.
/// - **Wake-ups from a watch** on the store's keys: a lease's key deleted
///   (a return, an expiry, a force return), a pool's record changed or a
///   place removed wakes that pool's waiters in every process; a session's
///   end wakes all. Waiting costs no call of its own but a share of the
///   places lease's keep-alive.
/// - **Compaction is the cluster's**: every borrow creates and deletes
///   keys, which etcd's index keeps until a compaction; run etcd with
///   auto-compaction (`--auto-compaction-retention`), or a hot pool's
///   looks slow as its history grows.
/// - **Lost replies:** a borrow is never retried blind: its retry looks for
///   the lease its first try may have granted (by its id) before it
///   grants anything.
///
/// Needs a tokio runtime.
///
/// ```no_run
/// use std::{sync::Arc, time::Duration};
/// use semaphore_etcd::{EtcdStore, Pool, PoolId};
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), semaphore_etcd::Error> {
/// let store = Arc::new(EtcdStore::connect(&["http://127.0.0.1:2379"]).await?);
/// let pool = Pool::new(store, PoolId::from_name("gpus"));
/// pool.register(4).await?; // idempotent: every machine may call it
/// let lease = pool.borrow(Duration::from_secs(600), Duration::from_secs(30)).await?;
/// println!("slot {} (fencing token {})", lease.position, lease.token);
/// # Ok(()) }
/// ```
pub struct EtcdStore {
    pub(crate) client: Client,
    pub(crate) keys: Keys,
    pub(crate) changes: Arc<Changes>,
    pub(crate) time: DecidingClock,
    pub(crate) session: Arc<Session>,
    pub(crate) process: ForkCheck,
    pub(crate) grants: crate::grants::Grants,
    pub(crate) places: Arc<crate::places::Places>,
    pub(crate) recent: crate::borrow::Recent,
    pub(crate) standings: Arc<crate::standing::Standings>,
    watch: tokio::task::AbortHandle,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("keys", &self.keys)
            .field("session", &self.session.current())
            .finish_non_exhaustive()
    }
}

impl Drop for EtcdStore {
    fn drop(&mut self) {
        self.watch.abort();
    }
}

impl EtcdStore {
    /// Connects to the etcd cluster at `endpoints` (`http://host:port`,
    /// any of its members) with [`EtcdOptions::default`].
    ///
    /// # Errors
    /// See [`connect_with`](EtcdStore::connect_with).
    pub async fn connect<E: AsRef<str> + Sync>(endpoints: &[E]) -> Result<Self> {
        Self::connect_with(endpoints, EtcdOptions::default()).await
    }

    /// Connects to the etcd cluster at `endpoints`, starts the watch that
    /// wakes this process's waiters, and opens the session that holds its
    /// bound leases (waiting up to 2 s for it).
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] naming `endpoints` (none, or one that
    ///   is not a URL), `prefix` or `session_timeout`.
    /// - [`Error::Storage`], retryable, if no endpoint answered.
    /// - [`Error::NoRuntime`] outside a tokio runtime.
    pub async fn connect_with<E: AsRef<str> + Sync>(
        endpoints: &[E],
        options: EtcdOptions,
    ) -> Result<Self> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::NoRuntime {
                operation: "connect",
            });
        }
        check_prefix("prefix", &options.prefix, 64, "-.")?;
        semaphore_core::store::check_session_timeout(options.session_timeout)?;
        if endpoints.is_empty() {
            return Err(Error::InvalidArgument {
                field: "endpoints",
                allowed: "one or more etcd endpoints, http://host:port".into(),
                got: "none".into(),
            });
        }
        let connect = ConnectOptions::new()
            .with_connect_timeout(options.connect_timeout)
            .with_keep_alive(Duration::from_secs(5), Duration::from_secs(5))
            .with_keep_alive_while_idle(true);
        let client = bounded("connect", async {
            Client::connect(endpoints, Some(connect))
                .await
                .map_err(|e| match e {
                    etcd_client::Error::InvalidUri(_) | etcd_client::Error::InvalidArgs(_) => {
                        Error::InvalidArgument {
                            field: "endpoints",
                            allowed: "etcd endpoints, http://host:port".into(),
                            got: e.to_string(),
                        }
                    }
                    e => storage("connect")(e),
                })
        })
        .await?;
        let keys = Keys::new(&options.prefix);
        // One call that needs the cluster: an unreachable one fails here.
        let mut kv = client.kv_client();
        bounded("connect", async {
            kv.get(
                keys.pools(),
                Some(etcd_client::GetOptions::new().with_count_only()),
            )
            .await
            .map_err(storage("connect"))
        })
        .await?;
        let changes = Arc::new(Changes::new());
        let beats = Beats {
            client: client.clone(),
            keys: keys.clone(),
            time: options.time.clone(),
            leases: parking_lot::Mutex::new(Default::default()),
            streams: parking_lot::Mutex::new(Default::default()),
        };
        let timeout =
            semaphore_core::store::session_timeout(options.session_timeout, &options.time);
        let session = Arc::new(Session::start(
            Arc::new(beats),
            timeout,
            options.time.clone(),
        ));
        let standings = Arc::new(crate::standing::Standings::default());
        let watch = crate::watch::start(
            client.clone(),
            keys.clone(),
            changes.clone(),
            Arc::downgrade(&session),
            standings.clone(),
            options.time.now_param().is_some(),
        );
        session.opened(SESSION_WAIT).await;
        Ok(Self {
            client,
            keys,
            changes,
            time: options.time,
            session,
            process: ForkCheck::here(),
            grants: Default::default(),
            places: Default::default(),
            recent: Default::default(),
            standings,
            watch,
        })
    }

    /// The client the store runs on, for a caller's own calls.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The instant records are dated from, unix ms: the test's clock, or
    /// this process's (which only dates: etcd judges).
    pub(crate) fn stamp(&self) -> u64 {
        unix_ms(self.time.clock().now())
    }

    /// One look at `pools` (at most [`MAX_POOLS`]) and every session.
    pub(crate) async fn look(
        &self,
        operation: &'static str,
        pools: &[PoolId],
    ) -> Result<(Vec<PoolView>, Look)> {
        self.look_with(operation, pools, reads(&self.keys, pools))
            .await
    }

    /// One look at `pools` through `ops` ([`reads`] or
    /// [`page_reads`](crate::view::page_reads)).
    pub(crate) async fn look_with(
        &self,
        operation: &'static str,
        pools: &[PoolId],
        ops: Vec<TxnOp>,
    ) -> Result<(Vec<PoolView>, Look)> {
        let response = self.txn(operation, read_txn(ops)).await?;
        Ok(self.seen(pools, response))
    }

    /// The pools a transaction's answer read, at its revision.
    fn seen(&self, pools: &[PoolId], response: TxnResponse) -> (Vec<PoolView>, Look) {
        let revision = response.header().map_or(0, |h| h.revision());
        parse(
            &self.keys,
            pools,
            response.op_responses(),
            self.time.now_param(),
            revision,
        )
    }

    /// Runs `txn`.
    pub(crate) async fn txn(&self, operation: &'static str, txn: Txn) -> Result<TxnResponse> {
        self.process.check(operation)?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::NoRuntime { operation });
        }
        let mut kv = self.client.kv_client();
        bounded(operation, async {
            let mut tries = 0;
            loop {
                match kv.txn(txn.clone()).await {
                    // Never sent (a member down, its connection refused):
                    // sent again, to whichever member the channel picks.
                    Err(e) if tries < NOT_SENT_TRIES && crate::error::not_sent(&e) => {
                        tries += 1;
                        tokio::time::sleep(Duration::from_millis(20 * tries)).await;
                    }
                    answer => return answer.map_err(storage(operation)),
                }
            }
        })
        .await
    }

    /// Runs `ops` if `view`'s keys are as `look` saw them; the revision
    /// they were written at, or `None` if another writer came first.
    pub(crate) async fn commit(
        &self,
        operation: &'static str,
        guards: Vec<Compare>,
        ops: Vec<TxnOp>,
    ) -> Result<Option<i64>> {
        let response = self
            .txn(operation, Txn::new().when(guards).and_then(ops))
            .await?;
        Ok(response
            .succeeded()
            .then(|| response.header().map_or(0, |h| h.revision())))
    }

    /// Runs `ops` if `guards` hold: the revision they were written at, or
    /// (another writer came first) a new look at `pools`, read by the same
    /// transaction, so that the next try needs no look of its own.
    pub(crate) async fn commit_or_look(
        &self,
        operation: &'static str,
        guards: Vec<Compare>,
        ops: Vec<TxnOp>,
        pools: &[PoolId],
    ) -> Result<Written> {
        let txn = Txn::new()
            .when(guards)
            .and_then(ops)
            .or_else(reads(&self.keys, pools));
        let response = self.txn(operation, txn).await?;
        if response.succeeded() {
            return Ok(Written::At(response.header().map_or(0, |h| h.revision())));
        }
        let (views, look) = self.seen(pools, response);
        Ok(Written::Changed(views, look))
    }

    /// As [`commit_or_look`](EtcdStore::commit_or_look), and reads the
    /// pools after a successful write too, in the same transaction: the
    /// revision written at (if it was), and the pools as they are then.
    pub(crate) async fn commit_then_look(
        &self,
        operation: &'static str,
        guards: Vec<Compare>,
        mut ops: Vec<TxnOp>,
        pools: &[PoolId],
    ) -> Result<(Option<i64>, Vec<PoolView>, Look)> {
        ops.extend(reads(&self.keys, pools));
        let txn = Txn::new()
            .when(guards)
            .and_then(ops)
            .or_else(reads(&self.keys, pools));
        let response = self.txn(operation, txn).await?;
        let written = response.succeeded();
        let (views, look) = self.seen(pools, response);
        Ok((written.then_some(look.revision), views, look))
    }

    /// The compares that hold while `view`'s pool is as `look` saw it: its
    /// record, and no lease or place written since (deletes only free).
    pub(crate) fn unchanged(&self, view: &PoolView, look: &Look) -> Vec<Compare> {
        let pool = match view.meta {
            Some((_, modified)) => {
                Compare::mod_revision(self.keys.pool(view.pool), CompareOp::Equal, modified)
            }
            None => Compare::create_revision(self.keys.pool(view.pool), CompareOp::Equal, 0),
        };
        let since = look.revision.saturating_add(1);
        vec![
            pool,
            Compare::mod_revision(self.keys.leases(view.pool), CompareOp::Less, since)
                .with_prefix(),
            Compare::mod_revision(self.keys.places(view.pool), CompareOp::Less, since)
                .with_prefix(),
        ]
    }

    /// A put of `value` at `key`, attached to `etcd_lease` unless it is 0.
    pub(crate) fn put(key: String, value: Vec<u8>, etcd_lease: i64) -> TxnOp {
        let options = (etcd_lease != 0).then(|| PutOptions::new().with_lease(etcd_lease));
        TxnOp::put(key, value, options)
    }
}
