//! [`App`]: what every handler shares (the store, the limits, the
//! server's drain and shutdown signals, metrics, the tickets' hold).

use std::sync::Arc;

use semaphore_core::store::Store;
use semaphore_core::{Limits, Pool, PoolId};
use tokio::sync::watch;

use crate::error::ApiError;
use crate::metrics::Metrics;

/// What every handler shares.
#[derive(Clone)]
pub(crate) struct App {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) limits: Limits,
    /// Turns `true` when the server shuts down: waiting borrows answer 503.
    pub(crate) shutdown: watch::Receiver<bool>,
    /// `true` while the server drains (SIGUSR1 until SIGUSR2): borrows
    /// answer 503, waiting ones at once; returns and renewals go on.
    pub(crate) draining: watch::Receiver<bool>,
    pub(crate) metrics: Metrics,
    /// Set when a store call failed and retrying will not help; cleared
    /// by the next call that succeeds. `/healthz` then probes the store.
    pub(crate) broken: Arc<std::sync::atomic::AtomicBool>,
    /// How long a ticket's place is kept after each poll
    /// (`--ticket-hold`).
    pub(crate) ticket_hold: std::time::Duration,
    /// Whether the server listens on a loopback address only: `GET /l`
    /// lists the pools there without a token ([`listing`](crate::listing)).
    pub(crate) loopback: bool,
    /// Whether requests bear the bearer token (`--auth-token-file`): the
    /// acts of the page (a forced return) need it.
    pub(crate) auth: bool,
    /// One listing at a time (`GET /l`): a page of 1000 pools is some 15
    /// borrows' work for the store.
    pub(crate) listings: Arc<tokio::sync::Semaphore>,
}

impl App {
    /// The handle of pool `id`, named in metrics by its alias if it has one.
    pub(crate) fn pool(&self, id: PoolId) -> Pool {
        let pool = Pool::new(self.store.clone(), id).with_limits(self.limits);
        match self.metrics.alias(id) {
            Some(alias) => pool.with_alias(alias.clone()),
            None => pool,
        }
    }

    pub(crate) fn now(&self) -> std::time::SystemTime {
        self.store.clock().now()
    }

    /// `result` as an answer, counting storage failures.
    pub(crate) fn track<T>(&self, result: Result<T, semaphore_core::Error>) -> Result<T, ApiError> {
        use std::sync::atomic::Ordering;
        match &result {
            Err(semaphore_core::Error::Storage {
                retryable: false, ..
            }) => self.broken.store(true, Ordering::Relaxed),
            Err(semaphore_core::Error::Storage { .. }) => {}
            _ => self.broken.store(false, Ordering::Relaxed),
        }
        result.map_err(ApiError::from)
    }

    /// Whether the store answers: an inspect of a pool that never exists.
    pub(crate) async fn probe(&self) -> Result<(), semaphore_core::Error> {
        let probe = Pool::new(
            self.store.clone(),
            PoolId::from_name("semaphore-readyz-probe"),
        );
        match probe.inspect().await {
            Ok(_) | Err(semaphore_core::Error::PoolNotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}
