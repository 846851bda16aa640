//! The two-phase routes' answers, shared by both kinds of ticket (held
//! places on a shared store, server-held tickets on the memory store): a
//! lease, a place in the queue, or an unknown ticket.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use semaphore_core::Lease;

use crate::app::App;
use crate::error::ApiError;
use crate::wire;

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
        poll_within: app.tickets.hold().as_secs_f64(),
    };
    (StatusCode::ACCEPTED, Json(body)).into_response()
}

/// A granted lease (200).
pub(crate) fn granted(app: &App, lease: &Lease) -> Response {
    Json(wire::Granted::new(lease, app.now())).into_response()
}
