//! The two-phase borrow routes (dflockd's enqueue/wait): `enqueue` answers
//! a lease or a ticket, `wait` long-polls the ticket, `cancel` gives it
//! up. A ticket's place is a held place in the store
//! ([`HeldPlace::wait`](semaphore_core::HeldPlace::wait)), kept between polls for as long as it is polled
//! within the server's `--ticket-hold`; any server sharing the store can
//! poll it.

use std::time::Duration;

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::response::Response;
use semaphore_core::{BorrowOptions, Pool, PoolId};

use crate::app::App;
use crate::error::ApiError;
use crate::extract::{JsonObject, PoolPath};
use crate::ticket::Ticket;
use crate::ticket_answer::{MAX_TICKETS_PER_POOL, granted, queued, too_many, unknown_ticket};
use crate::wire;

/// The ticket `text` describes: 400 if it is not in the format of a
/// ticket, 404 if it is but does not decode (not made by a server of this
/// kind).
fn ticket(text: &str) -> Result<Ticket, ApiError> {
    if !Ticket::looks_held(text) {
        return Err(ApiError::bad_request(
            "ticket is not a ticket: pass the text /enqueue answered",
            Some("ticket"),
        ));
    }
    Ticket::decode(text).ok_or_else(unknown_ticket)
}

#[utoipa::path(post, path = "/l/{id}/enqueue", tag = "two-phase",
    params(
        ("id" = uuid::Uuid, Path, description = "The pool's secret UUID"),
        ("Idempotency-Key" = Option<String>, Header, min_length = 1, max_length = 255,
            description = "A retry with the same key and body gets the same lease or ticket (1-255 bytes, printable)"),
    ),
    request_body = wire::Enqueue,
    responses(
        (status = 200, description = "A slot was free: the lease", body = wire::Granted),
        (status = 202, description = "Queued: poll the ticket with /wait", body = wire::Queued),
        (status = 400, description = "Bad input", body = crate::error::ErrorBody),
        (status = 404, description = "No such pool", body = crate::error::ErrorBody),
        (status = 413, description = "Body too large", body = crate::error::ErrorBody),
        (status = 415, description = "Not JSON", body = crate::error::ErrorBody),
        (status = 422, description = "The Idempotency-Key was used with another body", body = crate::error::ErrorBody),
        (status = 502, description = "The store failed", body = crate::error::ErrorBody),
        (status = 503, description = "The server shuts down or drains, the pool drains, or the pool keeps too many tickets (1,000)", body = crate::error::ErrorBody),
    ))]
pub(crate) async fn enqueue(
    State(app): State<App>,
    PoolPath(id): PoolPath,
    headers: axum::http::HeaderMap,
    JsonObject(request): JsonObject<wire::Enqueue>,
) -> Result<Response, ApiError> {
    let pool = app.pool(id);
    let ttl = wire::seconds("ttl", &request.ttl, true)?;
    let keyed = crate::idempotency::header(&headers)?.map(|key| {
        let asked = crate::idempotency::Request {
            route: "enqueue",
            ttl: request.ttl.to_string(),
            wait: None,
            owner: request.owner.as_deref(),
            slots: request.slots.as_ref().map(ToString::to_string),
            wait_while_draining: request.wait_while_draining,
        };
        crate::idempotency::derive(key, &asked)
    });
    // The lease is the client's: not bound to this server.
    let mut options = BorrowOptions::new()
        .bound(false)
        .wait_while_draining(request.wait_while_draining.unwrap_or(false));
    if let Some(slots) = &request.slots {
        options = options.slots(wire::slots(slots, app.limits.max_count)?);
    }
    if let Some(owner) = request.owner {
        options = options.owner(owner);
    }
    if *app.shutdown.borrow() {
        return Err(ApiError::shutting_down());
    }
    if *app.draining.borrow() {
        return Err(ApiError::draining());
    }
    let ticket = Ticket::new(id, ttl, &options, keyed.as_ref());
    let options = ticket.options();
    let waiter = ticket.waiter();
    let taken = pool
        .held(waiter)
        .wait(app.ticket_hold, ttl, Duration::ZERO, options);
    if let Some(guard) = app.track(taken.await)? {
        return Ok(granted(&app, &guard.forget()));
    }
    let place = app.track(pool.held(waiter).place().await)?;
    if place.is_some_and(|place| place > MAX_TICKETS_PER_POOL as u64) {
        // Past the pool's cap: the place goes, and nobody holds a ticket.
        app.track(pool.held(waiter).leave().await)?;
        return Err(too_many());
    }
    Ok(answer_queued_at(&app, &ticket, place))
}

#[utoipa::path(post, path = "/l/{id}/wait", tag = "two-phase",
    params(("id" = uuid::Uuid, Path, description = "The pool's secret UUID")),
    request_body = wire::Wait,
    responses(
        (status = 200, description = "Granted: the lease (again, to a repeated poll)", body = wire::Granted),
        (status = 202, description = "Still queued after the wait: poll again", body = wire::Queued),
        (status = 400, description = "Bad input", body = crate::error::ErrorBody),
        (status = 404, description = "No such ticket (dropped, cancelled, spent, or made by a server that does not share this one's store), or the pool was deleted", body = crate::error::ErrorBody),
        (status = 413, description = "Body too large", body = crate::error::ErrorBody),
        (status = 415, description = "Not JSON", body = crate::error::ErrorBody),
        (status = 502, description = "The store failed", body = crate::error::ErrorBody),
        (status = 503, description = "The server shuts down or drains (which drops its tickets), or the pool drains (the ticket ended)", body = crate::error::ErrorBody),
    ))]
pub(crate) async fn wait(
    State(app): State<App>,
    PoolPath(id): PoolPath,
    JsonObject(request): JsonObject<wire::Wait>,
) -> Result<Response, ApiError> {
    let wait = match &request.wait {
        Some(wait) => app.limits.clamp_wait(wire::seconds("wait", wait, false)?),
        None => Duration::ZERO,
    };
    if *app.draining.borrow() {
        return Err(ApiError::draining());
    }
    let ticket = ticket(&request.ticket)?;
    let pool = app.pool(id);
    // A place no longer kept was served (its lease, answered again while
    // it is active), or dropped: its hold passed without a poll, it was
    // cancelled, or its lease was returned. Polling it would queue anew at
    // the back, which the client must choose to do.
    if app
        .track(pool.held(ticket.waiter()).place().await)?
        .is_none()
    {
        return match app.track(pool.held(ticket.waiter()).lease(&ticket.options()).await)? {
            Some(lease) => Ok(granted(&app, &lease)),
            None => Err(unknown_ticket()),
        };
    }
    let (mut shutdown, mut draining) = (app.shutdown.clone(), app.draining.clone());
    let poll =
        pool.held(ticket.waiter())
            .wait(app.ticket_hold, ticket.ttl(), wait, ticket.options());
    // A client that disconnects drops this future; the place is kept, and
    // a lease granted meanwhile is found again by the next poll (its key).
    let polled = tokio::select! {
        polled = poll => app.track(polled)?,
        _ = shutdown.wait_for(|down| *down) => return Err(ApiError::shutting_down()),
        _ = draining.wait_for(|on| *on) => return Err(ApiError::draining()),
    };
    match polled {
        Some(guard) => Ok(granted(&app, &guard.forget())),
        None => {
            let place = app.track(pool.held(ticket.waiter()).place().await)?;
            Ok(answer_queued_at(&app, &ticket, place))
        }
    }
}

/// 202 with `ticket` at `place`, just asked for: a place is there, unless
/// a poll on another server was granted meanwhile (the next poll answers
/// that lease).
fn answer_queued_at(app: &App, ticket: &Ticket, place: Option<u64>) -> Response {
    queued(
        app,
        ticket.encode(),
        usize::try_from(place.unwrap_or(1)).unwrap_or(usize::MAX),
    )
}

#[utoipa::path(delete, path = "/l/{id}/tickets/{ticket}", tag = "two-phase",
    params(
        ("id" = uuid::Uuid, Path, description = "The pool's secret UUID"),
        ("ticket" = String, Path, description = "The ticket `enqueue` answered"),
    ),
    responses(
        (status = 200, description = "Whether the ticket was still queued, and is now given up", body = wire::Cancelled),
        (status = 400, description = "Bad input", body = crate::error::ErrorBody),
        (status = 502, description = "The store failed", body = crate::error::ErrorBody),
    ))]
pub(crate) async fn delete_ticket(
    State(app): State<App>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Json<wire::Cancelled>, ApiError> {
    let Ok(Path((id, ticket))) = path else {
        return Err(ApiError::bad_request(
            "the path needs a pool id and a ticket",
            Some("ticket"),
        ));
    };
    let id = PoolId::from_uuid(wire::uuid("id", &id)?);
    give_up(&app, id, &ticket).await
}

#[utoipa::path(post, path = "/l/{id}/cancel", tag = "two-phase",
    params(("id" = uuid::Uuid, Path, description = "The pool's secret UUID")),
    request_body = wire::Cancel,
    responses(
        (status = 200, description = "As `DELETE /l/{id}/tickets/{ticket}`, the documented route, which this one predates", body = wire::Cancelled),
        (status = 400, description = "Bad input", body = crate::error::ErrorBody),
        (status = 413, description = "Body too large", body = crate::error::ErrorBody),
        (status = 415, description = "Not JSON", body = crate::error::ErrorBody),
        (status = 502, description = "The store failed", body = crate::error::ErrorBody),
    ))]
pub(crate) async fn cancel(
    State(app): State<App>,
    PoolPath(id): PoolPath,
    JsonObject(request): JsonObject<wire::Cancel>,
) -> Result<Json<wire::Cancelled>, ApiError> {
    give_up(&app, id, &request.ticket).await
}

/// Gives up ticket `text` of pool `id`: its place leaves the store's
/// queue; whether it was still kept. A lease already granted to a poll
/// stays the client's (return it with /return); anything that is not a
/// ticket was kept by no one.
async fn give_up(app: &App, id: PoolId, text: &str) -> Result<Json<wire::Cancelled>, ApiError> {
    let Ok(ticket) = ticket(text) else {
        return Ok(Json(wire::Cancelled { cancelled: false }));
    };
    let pool: Pool = app.pool(id);
    let had = app
        .track(pool.held(ticket.waiter()).place().await)?
        .is_some();
    app.track(pool.held(ticket.waiter()).leave().await)?;
    Ok(Json(wire::Cancelled { cancelled: had }))
}
