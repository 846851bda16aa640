//! A tower layer that runs each HTTP request under a lease of a [`Pool`]:
//! tower's `ConcurrencyLimit`, with the limit kept in any store (rule
//! "Beyond the basic model").

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::{error::Error, lease::Lease, pool::Pool};

/// Answers a request that got no lease, from the error that said why:
/// [`Error::Exhausted`] when no slot freed up within the wait, or the
/// store's error. Any `Fn(&Error) -> http::Response<B>` is one.
pub trait Rejection<B> {
    /// The response sent instead of calling the inner service.
    fn reject(&self, error: &Error) -> http::Response<B>;
}

impl<B, F: Fn(&Error) -> http::Response<B>> Rejection<B> for F {
    fn reject(&self, error: &Error) -> http::Response<B> {
        self(error)
    }
}

/// The default [`Rejection`]: `503 Service Unavailable` with an empty body,
/// whatever the error, as a load balancer expects of a server at capacity.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unavailable;

impl<B: Default> Rejection<B> for Unavailable {
    fn reject(&self, _error: &Error) -> http::Response<B> {
        let mut response = http::Response::new(B::default());
        *response.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
        response
    }
}

/// A [`tower_layer::Layer`] that holds a slot of a [`Pool`] for each
/// request while the inner service answers it, like tower's
/// `ConcurrencyLimitLayer` but with the limit in a store, so that it can
/// span the processes and machines sharing it.
///
/// Each request borrows with [`Pool::borrow_owned`] (ttl and wait as set
/// here; the defaults are 30 s and 0), then:
/// - granted: the [`Lease`] (position, fencing token, expiry) goes into the
///   request's extensions, the inner service is called, and the lease is
///   returned when its response future completes (or is dropped). With
///   [`keep_alive`](PoolLimitLayer::keep_alive), it is renewed while the
///   request runs past its ttl.
/// - not granted: the [`Rejection`] answers, by default [`Unavailable`]
///   (503); the inner service is not called.
///
/// Unlike tower's, [`poll_ready`](tower_service::Service::poll_ready) does
/// not wait for a slot (it only asks the inner service): the wait happens
/// in the response future, bounded by the configured wait, so the layer
/// can sit inside routers such as axum's that call `poll_ready` eagerly.
///
/// ```
/// use std::{sync::Arc, time::Duration};
/// use axum::{Extension, Router, routing::get};
/// use semaphore_memory::{Lease, MemoryStore, Pool, PoolId, PoolLimitLayer};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), semaphore_memory::Error> {
/// let pool = Pool::new(Arc::new(MemoryStore::new()), PoolId::from_name("renders"));
/// pool.register(4).await?;
/// let app: Router = Router::new()
///     .route("/render", get(|Extension(lease): Extension<Lease>| async move {
///         format!("rendering on slot {} (token {})", lease.position, lease.token)
///     }))
///     .layer(PoolLimitLayer::new(pool).wait(Duration::from_secs(2)));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct PoolLimitLayer<R = Unavailable> {
    settings: Arc<Settings>,
    reject: R,
}

#[derive(Debug, Clone)]
struct Settings {
    pool: Pool,
    ttl: Duration,
    wait: Duration,
    keep_alive: bool,
}

impl PoolLimitLayer {
    /// A layer over `pool` with a 30 s ttl, no wait, no keep-alive and the
    /// [`Unavailable`] rejection. The pool must be registered.
    pub fn new(pool: Pool) -> Self {
        Self {
            settings: Arc::new(Settings {
                pool,
                ttl: Duration::from_secs(30),
                wait: Duration::ZERO,
                keep_alive: false,
            }),
            reject: Unavailable,
        }
    }
}

impl<R> PoolLimitLayer<R> {
    fn settings(mut self, change: impl FnOnce(&mut Settings)) -> Self {
        change(Arc::make_mut(&mut self.settings));
        self
    }

    /// Each request's lease ttl (checked and clamped as for
    /// [`Pool::borrow`]): what a request that outlives it without
    /// [`keep_alive`](PoolLimitLayer::keep_alive) loses its slot at.
    pub fn ttl(self, ttl: Duration) -> Self {
        self.settings(|s| s.ttl = ttl)
    }

    /// How long a request waits for a slot before it is rejected; zero (the
    /// default) rejects at once when the pool is full.
    pub fn wait(self, wait: Duration) -> Self {
        self.settings(|s| s.wait = wait)
    }

    /// Renews each request's lease while it runs
    /// ([`LeaseGuard::keep_alive`](crate::LeaseGuard::keep_alive)), for
    /// requests that may outlast the ttl.
    pub fn keep_alive(self, keep_alive: bool) -> Self {
        self.settings(|s| s.keep_alive = keep_alive)
    }

    /// The same layer answering refused requests with `reject`, a
    /// [`Rejection`] such as a closure `|e: &Error| -> http::Response<B>`.
    pub fn reject_with<R2>(self, reject: R2) -> PoolLimitLayer<R2> {
        PoolLimitLayer {
            settings: self.settings,
            reject,
        }
    }
}

impl<S, R: Clone> tower_layer::Layer<S> for PoolLimitLayer<R> {
    type Service = PoolLimit<S, R>;

    fn layer(&self, inner: S) -> PoolLimit<S, R> {
        PoolLimit {
            inner,
            settings: self.settings.clone(),
            reject: self.reject.clone(),
        }
    }
}

/// The service [`PoolLimitLayer`] makes: `inner`, called under a lease.
#[derive(Debug, Clone)]
pub struct PoolLimit<S, R = Unavailable> {
    inner: S,
    settings: Arc<Settings>,
    reject: R,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

impl<S, R, ReqBody, ResBody> tower_service::Service<http::Request<ReqBody>> for PoolLimit<S, R>
where
    S: tower_service::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
    R: Rejection<ResBody> + Clone + Send + Sync + 'static,
    ReqBody: Send + 'static,
{
    type Response = http::Response<ResBody>;
    type Error = S::Error;
    type Future = BoxFuture<Result<http::Response<ResBody>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<ReqBody>) -> Self::Future {
        // The inner service that was polled ready serves this request; a
        // clone takes its place for the next (tower's usual hand-over).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let settings = self.settings.clone();
        let reject = self.reject.clone();
        Box::pin(async move {
            let s = &*settings;
            let mut guard = match s.pool.borrow_owned(s.ttl, s.wait).await {
                Ok(guard) => guard,
                Err(error) => return Ok(reject.reject(&error)),
            };
            if s.keep_alive {
                guard.keep_alive();
            }
            request
                .extensions_mut()
                .insert::<Lease>(guard.lease().clone());
            let response = inner.call(request).await;
            drop(guard);
            response
        })
    }
}
