//! The two-phase routes' answers: a lease, a place in the queue, an
//! unknown ticket, or a pool that keeps as many tickets as it may.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use semaphore_core::Lease;

use crate::app::App;
use crate::error::ApiError;
use crate::wire;

/// The most tickets one pool's queue keeps (an enqueue placed past it in
/// the pool's queue answers 503 `too_many_tickets`), so that one pool's
/// clients cannot grow the store's queue without bound.
pub(crate) const MAX_TICKETS_PER_POOL: usize = 1_000;

/// The answer to an enqueue past [`MAX_TICKETS_PER_POOL`] (503).
pub(crate) fn too_many() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "too_many_tickets",
        "this pool keeps as many tickets as it may (1,000); borrow with a wait, or retry later",
    )
}

/// A ticket this server does not know (404).
pub(crate) fn unknown_ticket() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "ticket_not_found",
        "no such ticket: it was not polled within poll_within, was cancelled, ended with an \
         error, or was made by a server that does not share this one's store; enqueue again",
    )
}

/// A borrow still queued at `place` (202), to poll with its ticket.
pub(crate) fn queued(app: &App, ticket: String, place: usize) -> Response {
    let body = wire::Queued {
        ticket,
        place,
        poll_within: app.ticket_hold.as_secs_f64(),
    };
    (StatusCode::ACCEPTED, Json(body)).into_response()
}

/// A granted lease (200).
pub(crate) fn granted(app: &App, lease: &Lease) -> Response {
    Json(wire::Granted::new(lease, app.now())).into_response()
}
