//! Instrumentation behind the `tracing` and `metrics` features (rule
//! "Beyond the basic model"); without them every function here is empty
//! and inlines to nothing.
//!
//! What they report is listed in the crate docs ("Instrumentation").

// Each feature reads only some of what the hooks are given.
#![cfg_attr(
    not(all(feature = "tracing", feature = "metrics")),
    allow(unused_variables)
)]

use std::future::Future;
use std::sync::Arc;

use crate::{error::Error, error::Result, id::PoolId, lease::Lease};

#[cfg(any(feature = "tracing", feature = "metrics"))]
use std::time::Instant;

/// Names a pool in traces and metrics: its alias or a hash of its id. A
/// zero-sized nothing without the features.
#[derive(Debug, Clone)]
pub(crate) struct Name {
    #[cfg(any(feature = "tracing", feature = "metrics"))]
    label: Arc<str>,
    /// The keys of the pool's metrics, made at its first metric: a
    /// metric recorded through a key made once allocates nothing (the
    /// `metrics` macros allocate each key's labels at each call).
    #[cfg(feature = "metrics")]
    keys: Arc<std::sync::OnceLock<Keys>>,
}

/// The metrics of a pool (labelled `pool`), by name in the crate docs
/// ("Instrumentation").
#[cfg(feature = "metrics")]
#[derive(Debug, Clone, Copy)]
enum Metric {
    Grants,
    Exhausted,
    Returns,
    Expiries,
    StorageErrors,
    LeasesLost,
    InUse,
    Waiting,
    WaitSeconds,
}

#[cfg(feature = "metrics")]
impl Metric {
    const ALL: [Metric; 9] = [
        Metric::Grants,
        Metric::Exhausted,
        Metric::Returns,
        Metric::Expiries,
        Metric::StorageErrors,
        Metric::LeasesLost,
        Metric::InUse,
        Metric::Waiting,
        Metric::WaitSeconds,
    ];

    const fn name(self) -> &'static str {
        match self {
            Metric::Grants => "semaphore_grants_total",
            Metric::Exhausted => "semaphore_exhausted_total",
            Metric::Returns => "semaphore_returns_total",
            Metric::Expiries => "semaphore_expiries_total",
            Metric::StorageErrors => "semaphore_storage_errors_total",
            Metric::LeasesLost => "semaphore_leases_lost_total",
            Metric::InUse => "semaphore_in_use",
            Metric::Waiting => "semaphore_waiting",
            Metric::WaitSeconds => WAIT_SECONDS,
        }
    }
}

/// One key per [`Metric`], in [`Metric::ALL`]'s order.
#[cfg(feature = "metrics")]
type Keys = [metrics::Key; 9];

/// What the `metrics` macros would record with each metric of this crate.
#[cfg(feature = "metrics")]
static METADATA: metrics::Metadata<'static> =
    metrics::Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

/// The namespace of the one-way hash that names a pool without an alias.
#[cfg(any(feature = "tracing", feature = "metrics"))]
const HASH_NAMESPACE: uuid::Uuid = uuid::Uuid::from_u128(0x3b0e_52c4_7d1a_4f96_a8e2_90c1_5d6b_e7f4);

impl Name {
    /// The name of a pool without an alias.
    pub(crate) fn hashed(id: PoolId) -> Self {
        Self {
            #[cfg(feature = "metrics")]
            keys: Arc::default(),
            #[cfg(any(feature = "tracing", feature = "metrics"))]
            label: {
                let hash = uuid::Uuid::new_v5(&HASH_NAMESPACE, id.as_uuid().as_bytes());
                format!("pool-{}", &hash.simple().to_string()[..8]).into()
            },
        }
    }

    /// The name `alias`.
    pub(crate) fn alias(alias: &Arc<str>) -> Self {
        Self {
            #[cfg(feature = "metrics")]
            keys: Arc::default(),
            #[cfg(any(feature = "tracing", feature = "metrics"))]
            label: alias.clone(),
        }
    }

    /// The key of this pool's `metric`.
    #[cfg(feature = "metrics")]
    fn key(&self, metric: Metric) -> &metrics::Key {
        let keys = self.keys.get_or_init(|| {
            Metric::ALL.map(|m| {
                metrics::Key::from_parts(
                    m.name(),
                    vec![metrics::Label::new("pool", self.label.clone())],
                )
            })
        });
        &keys[metric as usize]
    }

    #[cfg(feature = "metrics")]
    fn counter(&self, metric: Metric) {
        let key = self.key(metric);
        metrics::with_recorder(|r| r.register_counter(key, &METADATA)).increment(1);
    }

    #[cfg(feature = "metrics")]
    fn gauge(&self, metric: Metric, delta: f64) {
        let key = self.key(metric);
        metrics::with_recorder(|r| r.register_gauge(key, &METADATA)).increment(delta);
    }

    #[cfg(feature = "metrics")]
    fn histogram(&self, metric: Metric, value: f64) {
        let key = self.key(metric);
        metrics::with_recorder(|r| r.register_histogram(key, &METADATA)).record(value);
    }

    /// Counts a storage error, if `result` is one.
    fn storage_error<T>(&self, result: &Result<T>) {
        #[cfg(feature = "metrics")]
        if matches!(result, Err(Error::Storage { .. })) {
            self.counter(Metric::StorageErrors);
        }
    }
}

/// The wait histogram's name.
#[cfg(feature = "metrics")]
const WAIT_SECONDS: &str = "semaphore_borrow_wait_seconds";

/// The batch histogram's name.
#[cfg(feature = "metrics")]
const BATCH_SIZE: &str = "semaphore_store_batch_size";

/// The busy retries' counter's name.
#[cfg(feature = "metrics")]
const BUSY_RETRIES: &str = "semaphore_store_busy_retries_total";

/// Gives each metric of the crate's `metrics` feature its description and
/// unit, in the recorder installed now: call it once after installing one
/// (an exporter then prints them, as Prometheus's `# HELP`). Optional:
/// metrics are recorded without it.
///
/// The metrics are listed in the crate docs ("Instrumentation").
#[cfg(feature = "metrics")]
pub fn describe_metrics() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!("semaphore_grants_total", Unit::Count, "Leases granted");
    describe_counter!(
        "semaphore_returns_total",
        Unit::Count,
        "Leases returned while still active"
    );
    describe_counter!(
        "semaphore_expiries_total",
        Unit::Count,
        "This process's leases found expired at their return or renewal"
    );
    describe_counter!(
        "semaphore_exhausted_total",
        Unit::Count,
        "Borrows that found no free slot within their wait"
    );
    describe_counter!(
        "semaphore_storage_errors_total",
        Unit::Count,
        "Calls that failed because the store failed"
    );
    describe_counter!(
        "semaphore_leases_lost_total",
        Unit::Count,
        "Leases a keep-alive renewal found gone"
    );
    describe_gauge!(
        "semaphore_in_use",
        Unit::Count,
        "Leases this process holds through guards"
    );
    describe_gauge!(
        "semaphore_waiting",
        Unit::Count,
        "This process's borrows in progress"
    );
    describe_histogram!(
        WAIT_SECONDS,
        Unit::Seconds,
        "Time from a borrow's call to its grant or refusal"
    );
    describe_histogram!(
        BATCH_SIZE,
        Unit::Count,
        "Primitives a store sent in one round trip (group commit)"
    );
    describe_counter!(
        BUSY_RETRIES,
        Unit::Count,
        "Times a store found its storage locked by another writer and tried again"
    );
}

/// A store sent `size` primitives in one round trip (rule "Group commit").
pub(crate) fn batched(size: usize) {
    #[cfg(feature = "metrics")]
    metrics::histogram!(BATCH_SIZE).record(size as f64);
}

/// Counts one retry of a store that found its storage locked by another
/// writer and tries again after a pause (SQLite's `SQLITE_BUSY`, answered
/// by its busy handler): counter `semaphore_store_busy_retries_total`, no
/// label, with the `metrics` feature; nothing without it. A store calls it
/// once per pause, so that the count per borrow tells how much of the
/// store's time went to waiting for a lock on a timer rather than in a
/// queue (BENCHMARKS.md line 20).
pub fn busy_retried() {
    #[cfg(feature = "metrics")]
    metrics::counter!(BUSY_RETRIES).increment(1);
}

/// One borrow in progress: its span, its start, and its place in the
/// waiting gauge until dropped.
pub(crate) struct Borrow {
    #[cfg(feature = "metrics")]
    name: Name,
    #[cfg(any(feature = "tracing", feature = "metrics"))]
    started: Instant,
    #[cfg(feature = "tracing")]
    span: tracing::Span,
}

impl Borrow {
    /// A borrow of `ttl` waiting up to `wait` starts.
    pub(crate) fn start(name: &Name, ttl: std::time::Duration, wait: std::time::Duration) -> Self {
        #[cfg(feature = "metrics")]
        name.gauge(Metric::Waiting, 1.0);
        Self {
            #[cfg(feature = "metrics")]
            name: name.clone(),
            #[cfg(any(feature = "tracing", feature = "metrics"))]
            started: Instant::now(),
            #[cfg(feature = "tracing")]
            span: tracing::debug_span!(
                target: "semaphore",
                "borrow",
                pool = &*name.label,
                ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
                wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                waited_ms = tracing::field::Empty,
                position = tracing::field::Empty,
                token = tracing::field::Empty,
                outcome = tracing::field::Empty,
                error = tracing::field::Empty,
            ),
        }
    }

    /// `future`, inside the borrow's span.
    #[cfg(feature = "tracing")]
    pub(crate) fn run<F: Future>(&self, future: F) -> tracing::instrument::Instrumented<F> {
        tracing::Instrument::instrument(future, self.span.clone())
    }

    /// `future`, as it is.
    #[cfg(not(feature = "tracing"))]
    pub(crate) fn run<F: Future>(&self, future: F) -> F {
        future
    }

    /// Records how the borrow ended.
    pub(crate) fn finish(&self, result: &Result<Lease>) {
        #[cfg(feature = "tracing")]
        {
            let waited = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
            self.span.record("waited_ms", waited);
            match result {
                Ok(lease) => {
                    self.span.record("position", lease.position);
                    self.span.record("token", lease.token);
                    self.span.record("outcome", "granted");
                }
                Err(Error::Exhausted { .. }) => {
                    self.span.record("outcome", "exhausted");
                }
                Err(e) => {
                    self.span.record("outcome", "error");
                    self.span.record("error", tracing::field::display(e));
                }
            }
        }
        #[cfg(feature = "metrics")]
        match result {
            Ok(_) | Err(Error::Exhausted { .. }) => {
                self.name.counter(if result.is_ok() {
                    Metric::Grants
                } else {
                    Metric::Exhausted
                });
                self.name
                    .histogram(Metric::WaitSeconds, self.started.elapsed().as_secs_f64());
            }
            Err(_) => self.name.storage_error(result),
        }
    }
}

impl Drop for Borrow {
    fn drop(&mut self) {
        #[cfg(feature = "metrics")]
        self.name.gauge(Metric::Waiting, -1.0);
    }
}

/// `result` as it is, counted if it is a storage error: for the calls that
/// report nothing else.
pub(crate) fn counted<T>(name: &Name, result: Result<T>) -> Result<T> {
    name.storage_error(&result);
    result
}

/// A guard now holds a lease of the pool `name`.
pub(crate) fn held(name: &Name) {
    #[cfg(feature = "metrics")]
    name.gauge(Metric::InUse, 1.0);
}

/// A guard no longer holds its lease (returned, forgotten or lost).
pub(crate) fn let_go(name: &Name) {
    #[cfg(feature = "metrics")]
    name.gauge(Metric::InUse, -1.0);
}

/// A return of `lease` was asked of the store; `result` if known.
pub(crate) fn returned(name: &Name, lease: Option<&Lease>, result: Option<&Result<bool>>) {
    #[cfg(feature = "tracing")]
    tracing::debug!(
        target: "semaphore",
        pool = &*name.label,
        position = lease.map(|l| l.position),
        token = lease.map(|l| l.token),
        active = result.and_then(|r| r.as_ref().ok().copied()),
        "lease returned"
    );
    #[cfg(feature = "metrics")]
    match result {
        None | Some(Ok(true)) => name.counter(Metric::Returns),
        Some(Ok(false)) => {}
        Some(r @ Err(_)) => name.storage_error(r),
    }
}

/// This process's lease turned out to have expired before its holder let
/// go of it.
pub(crate) fn expired(name: &Name, lease: &Lease) {
    #[cfg(feature = "tracing")]
    tracing::debug!(
        target: "semaphore",
        pool = &*name.label,
        position = lease.position,
        token = lease.token,
        "expired lease seen"
    );
    #[cfg(feature = "metrics")]
    name.counter(Metric::Expiries);
}

/// A renewal of `lease` ended with `result`.
pub(crate) fn renewed(name: &Name, lease: &Lease, result: &Result<Lease>) {
    match result {
        Ok(_renewed) => {
            #[cfg(feature = "tracing")]
            tracing::debug!(
                target: "semaphore",
                pool = &*name.label,
                position = _renewed.position,
                token = _renewed.token,
                "lease renewed"
            );
        }
        Err(Error::LeaseExpired { .. }) => expired(name, lease),
        Err(_) => name.storage_error(result),
    }
}

/// The lease at `position`, with fencing token `token`, was force-returned.
pub(crate) fn force_returned(name: &Name, position: u32, token: u64) {
    #[cfg(feature = "tracing")]
    tracing::info!(
        target: "semaphore",
        pool = &*name.label,
        position,
        token,
        "lease force-returned"
    );
}

/// A keep-alive renewal found `lease` gone, for `reason`.
pub(crate) fn lost(name: &Name, lease: &Lease, reason: &Error) {
    #[cfg(feature = "tracing")]
    tracing::warn!(
        target: "semaphore",
        pool = &*name.label,
        position = lease.position,
        token = lease.token,
        reason = %reason,
        "lease lost"
    );
    #[cfg(feature = "metrics")]
    name.counter(Metric::LeasesLost);
}
