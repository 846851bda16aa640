//! The routes: a thin mapping of the seed's HTTP API onto
//! `Pool`, as a store is of primitives onto SQL.

use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use semaphore_core::{BorrowOptions, LeaseId};
use tower_http::catch_panic::CatchPanicLayer;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::app::App;
use crate::error::ApiError;
use crate::extract::{JsonObject, PoolPath};
use crate::wire;

/// The router: the seed's five routes, the extensions, and the layers.
pub(crate) fn router(app: App) -> Router {
    // The routes and their OpenAPI paths come from this one list.
    let (router, document) = OpenApiRouter::with_openapi(crate::openapi::ApiDoc::openapi())
        .routes(routes!(crate::listing::list))
        .routes(routes!(register, inspect, delete))
        .routes(routes!(borrow))
        .routes(routes!(crate::two_phase::enqueue))
        .routes(routes!(crate::two_phase::wait))
        .routes(routes!(crate::two_phase::cancel))
        .routes(routes!(crate::two_phase::delete_ticket))
        .routes(routes!(return_lease))
        .routes(routes!(renew))
        .routes(routes!(holders))
        .routes(routes!(crate::force::force_return))
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(metrics))
        .split_for_parts();
    let document = crate::openapi::pretty(&crate::openapi::with_layer_answers(document));
    crate::page::routes(router)
        .route(
            "/openapi.json",
            get(move || async move {
                ([(header::CONTENT_TYPE, "application/json")], document).into_response()
            }),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(crate::extract::BODY_LIMIT))
        .layer(CatchPanicLayer::custom(|_| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "internal error",
            )
            .into_response()
        }))
        .with_state(app)
}

#[utoipa::path(put, path = "/l/{id}", tag = "pools",
    params(("id" = uuid::Uuid, Path, description = "The pool's secret UUID")),
    request_body = wire::Register,
    responses(
        (status = 200, description = "Created, or its count set", body = wire::State),
        (status = 400, description = "Bad input", body = crate::error::ErrorBody),
        (status = 413, description = "Body too large", body = crate::error::ErrorBody),
        (status = 415, description = "Not JSON", body = crate::error::ErrorBody),
        (status = 502, description = "The store failed", body = crate::error::ErrorBody),
    ))]
pub(crate) async fn register(
    State(app): State<App>,
    PoolPath(id): PoolPath,
    JsonObject(request): JsonObject<wire::Register>,
) -> Result<Json<wire::State>, ApiError> {
    let pool = app.pool(id);
    let count = wire::count(&request.count, app.limits.max_count)?;
    let mut state = app.track(pool.register(count).await)?;
    if let Some(draining) = request.draining {
        state = app.track(pool.set_draining(draining).await)?;
    }
    let waiting = app.track(pool.waiting_everywhere(&state, app.now()).await)?;
    Ok(Json(wire::State::of(state, waiting)))
}

#[utoipa::path(get, path = "/l/{id}", tag = "pools",
    params(("id" = uuid::Uuid, Path, description = "The pool's secret UUID")),
    responses(
        (status = 200, description = "The pool's state", body = wire::State),
        (status = 400, description = "Bad input", body = crate::error::ErrorBody),
        (status = 404, description = "No such pool", body = crate::error::ErrorBody),
        (status = 502, description = "The store failed", body = crate::error::ErrorBody),
    ))]
pub(crate) async fn inspect(
    State(app): State<App>,
    PoolPath(id): PoolPath,
) -> Result<Json<wire::State>, ApiError> {
    let pool = app.pool(id);
    let state = app.track(pool.inspect().await)?;
    let waiting = app.track(pool.waiting_everywhere(&state, app.now()).await)?;
    Ok(Json(wire::State::of(state, waiting)))
}

#[utoipa::path(delete, path = "/l/{id}", tag = "pools",
    params(("id" = uuid::Uuid, Path, description = "The pool's secret UUID")),
    responses(
        (status = 200, description = "Whether it existed", body = wire::Deleted),
        (status = 400, description = "Bad input", body = crate::error::ErrorBody),
        (status = 502, description = "The store failed", body = crate::error::ErrorBody),
    ))]
pub(crate) async fn delete(
    State(app): State<App>,
    PoolPath(id): PoolPath,
) -> Result<Response, ApiError> {
    let deleted = app.track(app.pool(id).delete().await)?;
    Ok(Json(wire::Deleted { deleted }).into_response())
}

#[utoipa::path(post, path = "/l/{id}/borrow", tag = "leases",
    params(
        ("id" = uuid::Uuid, Path, description = "The pool's secret UUID"),
        ("Idempotency-Key" = Option<String>, Header, min_length = 1, max_length = 255,
            description = "A retry with the same key while the lease is active gets the same lease (1-255 bytes, printable)"),
    ),
    request_body = wire::Borrow,
    responses(
        (status = 200, description = "The lowest free slot (the lowest `slots` free, with `slots`)", body = wire::Granted),
        (status = 400, description = "Bad input", body = crate::error::ErrorBody),
        (status = 404, description = "No such pool", body = crate::error::ErrorBody),
        (status = 409, description = "No resource available within the wait", body = crate::error::ErrorBody),
        (status = 413, description = "Body too large", body = crate::error::ErrorBody),
        (status = 415, description = "Not JSON", body = crate::error::ErrorBody),
        (status = 422, description = "The Idempotency-Key was used with a different body", body = crate::error::ErrorBody),
        (status = 502, description = "The store failed", body = crate::error::ErrorBody),
        (status = 503, description = "The server is shutting down or drains (SIGUSR1), or the pool drains", body = crate::error::ErrorBody),
    ))]
pub(crate) async fn borrow(
    State(app): State<App>,
    PoolPath(id): PoolPath,
    headers: HeaderMap,
    JsonObject(request): JsonObject<wire::Borrow>,
) -> Result<Json<wire::Granted>, ApiError> {
    let pool = app.pool(id);
    let ttl = wire::seconds("ttl", &request.ttl, true)?;
    let wait = match &request.wait {
        Some(wait) => wire::seconds("wait", wait, false)?,
        None => Duration::ZERO,
    };
    // The lease is the client's, not this server's: it must outlive the
    // server's process and its connections (not bound).
    let mut options = BorrowOptions::new()
        .bound(false)
        .wait_while_draining(request.wait_while_draining.unwrap_or(false));
    if let Some(slots) = &request.slots {
        options = options.slots(wire::slots(slots, app.limits.max_count)?);
    }
    if let Some(key) = crate::idempotency::header(&headers)? {
        let asked = crate::idempotency::Request {
            route: "borrow",
            ttl: request.ttl.to_string(),
            wait: request.wait.as_ref().map(ToString::to_string),
            owner: request.owner.as_deref(),
            slots: request.slots.as_ref().map(ToString::to_string),
            wait_while_draining: request.wait_while_draining,
        };
        options = crate::idempotency::keyed(options, key, &asked);
    }
    if let Some(owner) = request.owner {
        options = options.owner(owner);
    }
    let (mut shutdown, mut draining) = (app.shutdown.clone(), app.draining.clone());
    if *draining.borrow() {
        return Err(ApiError::draining());
    }
    // A client that disconnects drops this future: the borrow leaves the
    // queue and takes nothing.
    let lease = tokio::select! {
        lease = pool.borrow_with(ttl, wait, options) => lease.map(|guard| guard.forget()),
        _ = shutdown.wait_for(|down| *down) => return Err(ApiError::shutting_down()),
        _ = draining.wait_for(|on| *on) => return Err(ApiError::draining()),
    };
    let lease = app.track(lease)?;
    Ok(Json(wire::Granted::new(&lease, app.now())))
}

#[utoipa::path(post, path = "/l/{id}/return", tag = "leases",
    params(("id" = uuid::Uuid, Path, description = "The pool's secret UUID")),
    request_body = wire::Return,
    responses(
        (status = 200, description = "Whether the lease was active", body = wire::Returned),
        (status = 400, description = "Bad input", body = crate::error::ErrorBody),
        (status = 413, description = "Body too large", body = crate::error::ErrorBody),
        (status = 415, description = "Not JSON", body = crate::error::ErrorBody),
        (status = 502, description = "The store failed", body = crate::error::ErrorBody),
    ))]
pub(crate) async fn return_lease(
    State(app): State<App>,
    PoolPath(id): PoolPath,
    JsonObject(request): JsonObject<wire::Return>,
) -> Result<Response, ApiError> {
    let pool = app.pool(id);
    let lease = LeaseId::from_uuid(wire::uuid("lease", &request.lease)?);
    let returned = app.track(pool.return_lease(lease).await)?;
    Ok(Json(wire::Returned { returned }).into_response())
}

#[utoipa::path(post, path = "/l/{id}/renew", tag = "leases",
    params(("id" = uuid::Uuid, Path, description = "The pool's secret UUID")),
    request_body = wire::Renew,
    responses(
        (status = 200, description = "The renewed lease: same position and token", body = wire::Granted),
        (status = 400, description = "Bad input", body = crate::error::ErrorBody),
        (status = 404, description = "No such pool, or the lease is not active", body = crate::error::ErrorBody),
        (status = 413, description = "Body too large", body = crate::error::ErrorBody),
        (status = 415, description = "Not JSON", body = crate::error::ErrorBody),
        (status = 502, description = "The store failed", body = crate::error::ErrorBody),
    ))]
pub(crate) async fn renew(
    State(app): State<App>,
    PoolPath(id): PoolPath,
    JsonObject(request): JsonObject<wire::Renew>,
) -> Result<Json<wire::Granted>, ApiError> {
    let pool = app.pool(id);
    let lease = LeaseId::from_uuid(wire::uuid("lease", &request.lease)?);
    let ttl = wire::seconds("ttl", &request.ttl, true)?;
    let renewed = app.track(pool.renew(lease, ttl).await)?;
    Ok(Json(wire::Granted::new(&renewed, app.now())))
}

/// The holders (positions, tokens, owners, expiries; never lease ids),
/// and everyone known to wait for the pool, in line (never waiter ids).
#[utoipa::path(get, path = "/l/{id}/leases", tag = "leases",
    params(("id" = uuid::Uuid, Path, description = "The pool's secret UUID")),
    responses(
        (status = 200, description = "Holders, never with lease ids", body = wire::Holders),
        (status = 400, description = "Bad input", body = crate::error::ErrorBody),
        (status = 404, description = "No such pool", body = crate::error::ErrorBody),
        (status = 502, description = "The store failed", body = crate::error::ErrorBody),
    ))]
pub(crate) async fn holders(
    State(app): State<App>,
    PoolPath(id): PoolPath,
) -> Result<Response, ApiError> {
    let now = app.now();
    let pool = app.pool(id);
    let holders: Vec<wire::Holder> = app
        .track(pool.holders().await)?
        .iter()
        .map(|h| wire::Holder::new(h, now))
        .collect();
    let queue: Vec<wire::Waiter> = app
        .track(pool.queue().await)?
        .iter()
        .enumerate()
        .map(|(i, p)| wire::Waiter::new(i + 1, p, now))
        .collect();
    Ok(Json(wire::Holders {
        leases: holders,
        waiting: queue.len(),
        queue,
    })
    .into_response())
}

/// Liveness: 200 while the process can serve.
///
/// When store calls have failed in a way retrying will not mend (a SQLite
/// file deleted under the server, say), it probes the store and answers 503
/// while the probe fails so, for an orchestrator to restart the server,
/// which opens the store anew.
#[utoipa::path(get, path = "/healthz", tag = "service",
    responses(
        (status = 200, description = "The process runs", body = wire::Status),
        (status = 503, description = "The store fails and will not recover without a restart", body = crate::error::ErrorBody),
    ))]
pub(crate) async fn healthz(State(app): State<App>) -> Result<Response, ApiError> {
    use std::sync::atomic::Ordering;
    if app.broken.load(Ordering::Relaxed) {
        match app.probe().await {
            Err(semaphore_core::Error::Storage {
                retryable: false, ..
            }) => {
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "store_broken",
                    "the store fails and retrying will not help: restart the server",
                )
                .not_retryable());
            }
            _ => app.broken.store(false, Ordering::Relaxed),
        }
    }
    Ok(Json(wire::Status { status: "ok" }).into_response())
}

/// Ready when the store answers (an inspect of a pool that never exists)
/// and the server does not drain.
#[utoipa::path(get, path = "/readyz", tag = "service",
    responses(
        (status = 200, description = "The store answers", body = wire::Status),
        (status = 503, description = "The server drains (SIGUSR1): send new work elsewhere", body = crate::error::ErrorBody),
        (status = 502, description = "The store failed", body = crate::error::ErrorBody),
    ))]
pub(crate) async fn readyz(State(app): State<App>) -> Result<Response, ApiError> {
    if *app.draining.borrow() {
        return Err(ApiError::draining());
    }
    let probe = app.probe().await;
    app.track(probe)?;
    Ok(Json(wire::Status { status: "ready" }).into_response())
}

/// Prometheus metrics, in its text format (version 0.0.4).
#[utoipa::path(get, path = "/metrics", tag = "service",
    responses((status = 200, description = "Counters, the wait histogram, and gauges of aliased pools",
        content_type = "text/plain; version=0.0.4; charset=utf-8", body = String)))]
pub(crate) async fn metrics(State(app): State<App>) -> Response {
    (
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        app.metrics.render(&app.store).await,
    )
        .into_response()
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this route does not take that method: see the API in the README",
    )
}

async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no_route",
        "no such route: see the API in the README",
    )
}
