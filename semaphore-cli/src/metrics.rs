//! Prometheus metrics (`GET /metrics`, the official `prometheus-client`
//! crate): what a grant, a return and a refusal cost and how often they
//! happen. The pool UUID is the bearer secret, so it never appears: per-pool
//! gauges are kept only for pools the operator named with `--alias
//! NAME=UUID`, under that name.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use semaphore_core::store::Store;
use semaphore_core::{Pool, PoolId};

/// The pool label of a per-pool gauge: the operator's alias.
type ByAlias = Family<Vec<(String, String)>, Gauge>;

/// The service's metrics.
#[derive(Clone)]
pub(crate) struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    grants: Counter,
    returns: Counter,
    exhausted: Counter,
    storage_errors: Counter,
    wait: Histogram,
    aliases: Vec<(String, PoolId)>,
    in_use: ByAlias,
    available: ByAlias,
    count: ByAlias,
    waiting: ByAlias,
}

impl Metrics {
    pub(crate) fn new(aliases: Vec<(String, PoolId)>) -> Self {
        let mut registry = Registry::with_prefix("semaphore");
        let (grants, returns, exhausted, storage_errors) = (
            Counter::default(),
            Counter::default(),
            Counter::default(),
            Counter::default(),
        );
        registry.register("grants", "Leases granted", grants.clone());
        registry.register(
            "returns",
            "Leases returned early (returned: true)",
            returns.clone(),
        );
        registry.register(
            "exhausted",
            "Borrows refused with 409 after their wait",
            exhausted.clone(),
        );
        registry.register(
            "storage_errors",
            "Calls that failed with 502",
            storage_errors.clone(),
        );
        let wait = Histogram::new([0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0]);
        registry.register(
            "borrow_wait_seconds",
            "Time from a borrow's arrival to its grant or refusal",
            wait.clone(),
        );
        let gauges: [(&str, &str); 4] = [
            ("pool_in_use", "Active leases of an aliased pool"),
            ("pool_available", "Free slots of an aliased pool"),
            ("pool_count", "Slots of an aliased pool"),
            (
                "pool_waiting",
                "Borrowers waiting on an aliased pool at this server",
            ),
        ];
        let families: [ByAlias; 4] = Default::default();
        for ((name, help), family) in gauges.iter().zip(&families) {
            registry.register(*name, *help, family.clone());
        }
        let [in_use, available, count, waiting] = families;
        Self {
            inner: Arc::new(Inner {
                registry,
                grants,
                returns,
                exhausted,
                storage_errors,
                wait,
                aliases,
                in_use,
                available,
                count,
                waiting,
            }),
        }
    }

    pub(crate) fn granted(&self, waited: Duration) {
        self.inner.grants.inc();
        self.inner.wait.observe(waited.as_secs_f64());
    }

    pub(crate) fn exhausted(&self, waited: Duration) {
        self.inner.exhausted.inc();
        self.inner.wait.observe(waited.as_secs_f64());
    }

    pub(crate) fn returned(&self) {
        self.inner.returns.inc();
    }

    pub(crate) fn storage_error(&self) {
        self.inner.storage_errors.inc();
    }

    /// The text exposition, with the aliased pools' gauges read now.
    pub(crate) async fn render(&self, store: &Arc<dyn Store>) -> String {
        let inner = &self.inner;
        for (alias, id) in &inner.aliases {
            let pool = Pool::new(store.clone(), *id);
            let label = vec![("pool".to_string(), alias.clone())];
            if let Ok(state) = pool.inspect().await {
                inner
                    .in_use
                    .get_or_create(&label)
                    .set(i64::from(state.in_use));
                inner
                    .available
                    .get_or_create(&label)
                    .set(i64::from(state.available));
                inner
                    .count
                    .get_or_create(&label)
                    .set(i64::from(state.count));
            }
            let waiting = i64::try_from(pool.waiting()).unwrap_or(i64::MAX);
            inner.waiting.get_or_create(&label).set(waiting);
        }
        let mut text = String::new();
        if encode(&mut text, &inner.registry).is_err() {
            text = "# the metrics could not be encoded\n".into();
        }
        text
    }
}
