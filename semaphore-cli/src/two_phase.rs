//! The two-phase borrow routes (dflockd's enqueue/wait): `enqueue` answers
//! a lease or a ticket, `wait` long-polls the ticket, `cancel` gives it
//! up. A ticket keeps its place in the queue between polls for as long as
//! it is polled within the server's `--ticket-hold`.

use std::time::Duration;

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::response::Response;
use semaphore_core::{BorrowOptions, Enqueued, Error, Lease, PoolId};
use tokio::time::Instant;

use crate::app::App;
use crate::error::ApiError;
use crate::extract::{JsonObject, PoolPath};
use crate::held::HeldTicket;
use crate::ticket_answer::{granted, queued, unknown_ticket};
use crate::wire;

/// The held ticket `text` names on a shared store (`None` on a memory
/// store, whose tickets are UUIDs this server keeps). A ticket this server
/// could not have made (the other kind, or a held one that does not
/// decode) is unknown: 404.
fn held_ticket(app: &App, text: &str) -> Result<Option<HeldTicket>, ApiError> {
    match (app.tickets.in_store(), HeldTicket::decode(text)) {
        (true, Some(held)) => Ok(Some(held)),
        (false, None) if !HeldTicket::looks_held(text) => Ok(None),
        _ => Err(unknown_ticket()),
    }
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
        (status = 503, description = "The server shuts down or drains, the pool drains, or the pool or the server keeps too many tickets (1,000 per pool)", body = crate::error::ErrorBody),
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
    // The lease is the client's: not bound to this server (R16).
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
    if app.tickets.in_store() {
        return crate::held::enqueue(&app, &pool, ttl, options, keyed).await;
    }
    if let Some(keyed) = &keyed {
        // A retry of an enqueue that was queued: its ticket again.
        match app.tickets.by_key(id, keyed) {
            Some(Ok(ticket)) => return again(&app, id, ticket).await,
            Some(Err(())) => return Err(Error::KeyReused { pool: id }.into()),
            None => options = keyed.options(options),
        }
    }
    match app.track(pool.enqueue(ttl, options).await)? {
        Enqueued::Granted(guard) => Ok(granted(&app, &guard.forget())),
        Enqueued::Queued(borrow) => {
            let place = borrow.place().unwrap_or(1);
            let ticket = app
                .tickets
                .insert(borrow, place, keyed)
                .ok_or_else(crate::tickets::too_many)?;
            Ok(queued(&app, ticket.to_string(), place))
        }
    }
}

/// A retried enqueue's ticket `ticket_id` of pool `id`: its lease if a poll
/// collected one (while active), or the ticket at its place.
async fn again(app: &App, id: PoolId, ticket_id: uuid::Uuid) -> Result<Response, ApiError> {
    let poll = app.tickets.poll(id, ticket_id).ok_or_else(unknown_ticket)?;
    let handed = poll.ticket.granted.lock().clone();
    if let Some(lease) = handed {
        return still_held(app, id, ticket_id, &lease).await;
    }
    let place = poll.ticket.place.load(std::sync::atomic::Ordering::Relaxed);
    Ok(queued(app, ticket_id.to_string(), place))
}

#[utoipa::path(post, path = "/l/{id}/wait", tag = "two-phase",
    params(("id" = uuid::Uuid, Path, description = "The pool's secret UUID")),
    request_body = wire::Wait,
    responses(
        (status = 200, description = "Granted: the lease (again, to a repeated poll)", body = wire::Granted),
        (status = 202, description = "Still queued after the wait: poll again", body = wire::Queued),
        (status = 400, description = "Bad input", body = crate::error::ErrorBody),
        (status = 404, description = "No such ticket on this server, or the pool was deleted", body = crate::error::ErrorBody),
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
    if let Some(held) = held_ticket(&app, &request.ticket)? {
        return crate::held::wait(&app, &app.pool(id), &held, wait).await;
    }
    let ticket_id = wire::uuid("ticket", &request.ticket)?;
    let (mut shutdown, mut draining) = (app.shutdown.clone(), app.draining.clone());
    let poll = app.tickets.poll(id, ticket_id).ok_or_else(unknown_ticket)?;
    let ticket = &poll.ticket;
    let handed = ticket.granted.lock().clone();
    if let Some(lease) = handed {
        return still_held(&app, id, ticket_id, &lease).await;
    }
    let deadline = Instant::now() + wait.min(Duration::from_secs(86_400 * 365));
    let answer = async {
        // Another poll of the same ticket may hold it: wait for that one
        // within this wait, and share its lease.
        let Ok(mut borrow) = tokio::time::timeout_at(deadline, ticket.borrow.lock()).await else {
            return Ok(None);
        };
        if let Some(lease) = ticket.granted.lock().clone() {
            return Ok(Some(lease));
        }
        let Some(queued) = borrow.as_mut() else {
            return Err(unknown_ticket());
        };
        let left = deadline.saturating_duration_since(Instant::now());
        match queued.wait(left).await {
            Ok(Some(guard)) => {
                let lease = guard.forget();
                *ticket.granted.lock() = Some(lease.clone());
                *borrow = None;
                Ok(Some(lease))
            }
            Ok(None) => {
                let place = queued.place().unwrap_or(1);
                ticket
                    .place
                    .store(place, std::sync::atomic::Ordering::Relaxed);
                Ok(None)
            }
            Err(e) => {
                *borrow = None;
                drop(app.tickets.remove(id, ticket_id));
                app.track(Err(e))
            }
        }
    };
    // A client that disconnects drops this future; the ticket keeps its
    // place, and a lease granted meanwhile waits for the next poll.
    let answer = tokio::select! {
        answer = answer => answer?,
        _ = shutdown.wait_for(|down| *down) => return Err(ApiError::shutting_down()),
        _ = draining.wait_for(|on| *on) => return Err(ApiError::draining()),
    };
    Ok(match answer {
        Some(lease) => granted(&app, &lease),
        None => queued(
            &app,
            ticket_id.to_string(),
            ticket.place.load(std::sync::atomic::Ordering::Relaxed),
        ),
    })
}

/// A repeated poll of a ticket whose lease a poll handed over: that lease
/// again while it is active (with its expiry now, after renewals), and 404
/// once it was returned or expired, as on a shared store: a ticket is
/// spent with its lease, and a position granted since to someone else is
/// never answered as this ticket's.
async fn still_held(
    app: &App,
    id: PoolId,
    ticket_id: uuid::Uuid,
    lease: &Lease,
) -> Result<Response, ApiError> {
    let holders = app.track(app.pool(id).holders().await)?;
    match holders.iter().find(|h| h.lease.token == lease.token) {
        Some(holder) => {
            let mut lease = lease.clone();
            lease.expires_at = holder.lease.expires_at;
            Ok(granted(app, &lease))
        }
        None => {
            drop(app.tickets.remove(id, ticket_id));
            Err(unknown_ticket())
        }
    }
}

#[utoipa::path(delete, path = "/l/{id}/tickets/{ticket}", tag = "two-phase",
    params(
        ("id" = uuid::Uuid, Path, description = "The pool's secret UUID"),
        ("ticket" = String, Path, description = "The ticket `enqueue` answered"),
    ),
    responses(
        (status = 200, description = "Whether the ticket was still queued (or, on a memory store, granted and not collected), and is now given up", body = wire::Cancelled),
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

/// Gives up ticket `text` of pool `id`: whether it was still kept.
async fn give_up(app: &App, id: PoolId, text: &str) -> Result<Json<wire::Cancelled>, ApiError> {
    match held_ticket(app, text) {
        Ok(Some(held)) => return crate::held::cancel(app, &app.pool(id), &held).await,
        Ok(None) => {}
        Err(_) => return Ok(Json(wire::Cancelled { cancelled: false })),
    }
    let ticket_id = wire::uuid("ticket", text)?;
    let Some(ticket) = app.tickets.remove(id, ticket_id) else {
        return Ok(Json(wire::Cancelled { cancelled: false }));
    };
    // A lease already collected stays the client's: return it with
    // /return. A poll in flight keeps the borrow until it ends, and the
    // borrow leaves the queue then.
    let cancelled = ticket.granted.lock().is_none();
    let borrow = ticket.borrow.try_lock().ok().and_then(|mut b| b.take());
    if let Some(borrow) = borrow {
        app.track(borrow.cancel().await)?;
    }
    Ok(Json(wire::Cancelled { cancelled }))
}
