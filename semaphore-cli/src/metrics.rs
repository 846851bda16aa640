//! Prometheus metrics (`GET /metrics`): what the core reports through the
//! `metrics` facade (grants, returns, refusals, storage errors, the wait
//! histogram), recorded by `metrics-exporter-prometheus`, plus gauges of
//! the aliased pools read from the store at each scrape.
//!
//! The pool UUID is the bearer secret, so it never appears, and any client
//! can create pools, so per-pool series are kept only for the pools the
//! operator named with `--alias NAME=UUID`: the core labels every other
//! pool with a hash of its id, and [`AliasedOnly`] drops that label, so
//! those pools share one unlabelled series per metric (bounded, whatever
//! clients create).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use semaphore_core::store::Store;
use semaphore_core::{Pool, PoolId};

use crate::exit::Exit;

/// The wait histogram's buckets, in seconds: sub-millisecond grants to the
/// longest `--max-wait` people set.
const WAIT_BUCKETS: [f64; 10] = [0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0];

/// The content type of [`Metrics::render`]'s text.
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The service's metrics: the installed recorder's handle and the aliases.
#[derive(Clone)]
pub(crate) struct Metrics {
    handle: PrometheusHandle,
    aliases: Arc<HashMap<PoolId, Arc<str>>>,
}

impl Metrics {
    /// Installs the process's metrics recorder, keeping the `pool` label
    /// of the aliased pools only.
    ///
    /// # Errors
    /// Exit 64 if two aliases share a name or a pool; 70 if a recorder is
    /// installed already (one server per process).
    pub(crate) fn install(aliases: Vec<(String, PoolId)>) -> Result<Self, Exit> {
        let pairs = aliases.len();
        let aliases: HashMap<PoolId, Arc<str>> = aliases
            .into_iter()
            .map(|(name, id)| (id, name.into()))
            .collect();
        let kept: HashSet<String> = aliases.values().map(|a| a.to_string()).collect();
        if kept.len() != pairs || aliases.len() != pairs {
            return Err(Exit::new(
                64,
                "each --alias needs a name and a pool of its own",
            ));
        }
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(
                Matcher::Full("semaphore_borrow_wait_seconds".into()),
                &WAIT_BUCKETS,
            )
            .map_err(|e| Exit::new(70, e.to_string()))?
            .build_recorder();
        let handle = recorder.handle();
        metrics::set_global_recorder(AliasedOnly {
            inner: recorder,
            kept,
        })
        .map_err(|_| {
            Exit::new(
                70,
                "a metrics recorder is installed already in this process",
            )
        })?;
        semaphore_core::describe_metrics();
        for (name, help) in GAUGES {
            let unit = if name.ends_with("_seconds") {
                Unit::Seconds
            } else {
                Unit::Count
            };
            metrics::describe_gauge!(name, unit, help);
        }
        // The counters start at zero, so that a rate over them has a start.
        for name in COUNTERS {
            metrics::counter!(name).absolute(0);
            for alias in aliases.values() {
                metrics::counter!(name, "pool" => alias.to_string()).absolute(0);
            }
        }
        Ok(Self {
            handle,
            aliases: Arc::new(aliases),
        })
    }

    /// The operator's alias of pool `id`, if it has one.
    pub(crate) fn alias(&self, id: PoolId) -> Option<&Arc<str>> {
        self.aliases.get(&id)
    }

    /// The Prometheus text exposition, with the aliased pools' gauges read
    /// now. A pool the store cannot inspect keeps its last values.
    pub(crate) async fn render(&self, store: &Arc<dyn Store>) -> String {
        for (id, alias) in self.aliases.iter() {
            let pool = Pool::new(store.clone(), *id);
            let gauge = |name: &'static str| metrics::gauge!(name, "pool" => alias.to_string());
            let Ok(state) = pool.inspect().await else {
                continue;
            };
            gauge("semaphore_pool_in_use").set(state.in_use);
            gauge("semaphore_pool_available").set(state.available);
            gauge("semaphore_pool_count").set(state.count);
            // Every borrower known to wait, tickets included.
            let now = store.clock().now();
            if let Ok(waiting) = pool.waiting_everywhere(&state, now).await {
                gauge("semaphore_pool_waiting").set(waiting.count as f64);
                let longest = waiting.longest.unwrap_or_default();
                gauge("semaphore_pool_longest_wait_seconds").set(longest.as_secs_f64());
            }
        }
        self.handle.render()
    }
}

/// The core's counters that the service shows from its start.
const COUNTERS: [&str; 4] = [
    "semaphore_grants_total",
    "semaphore_returns_total",
    "semaphore_exhausted_total",
    "semaphore_storage_errors_total",
];

/// The gauges read at each scrape, with their help.
const GAUGES: [(&str, &str); 5] = [
    ("semaphore_pool_in_use", "Active leases of an aliased pool"),
    ("semaphore_pool_available", "Free slots of an aliased pool"),
    ("semaphore_pool_count", "Slots of an aliased pool"),
    (
        "semaphore_pool_waiting",
        "Borrowers known to wait for an aliased pool: this server's, every ticket, and one per other process queued on the store",
    ),
    (
        "semaphore_pool_longest_wait_seconds",
        "How long the longest waiter of an aliased pool at this server has waited",
    ),
];

/// A recorder that drops the `pool` label unless its value is one of
/// `kept`, so unaliased pools (labelled by a hash of their secret id, one
/// per pool any client creates) add no series.
struct AliasedOnly<R> {
    inner: R,
    kept: HashSet<String>,
}

impl<R> AliasedOnly<R> {
    /// `key`, without its `pool` label unless that names a kept pool.
    fn key(&self, key: &Key) -> Key {
        let dropped = |l: &metrics::Label| l.key() == "pool" && !self.kept.contains(l.value());
        if !key.labels().any(dropped) {
            return key.clone();
        }
        let labels: Vec<_> = key.labels().filter(|l| !dropped(l)).cloned().collect();
        Key::from_parts(key.name_shared(), labels)
    }
}

impl<R: Recorder> Recorder for AliasedOnly<R> {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_counter(key, unit, description);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_gauge(key, unit, description);
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_histogram(key, unit, description);
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        self.inner.register_counter(&self.key(key), metadata)
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        self.inner.register_gauge(&self.key(key), metadata)
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        self.inner.register_histogram(&self.key(key), metadata)
    }
}
