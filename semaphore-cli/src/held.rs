//! Tickets on a shared store: the place is kept in the store
//! ([`Pool::wait_held`](semaphore_core::Pool::wait_held)), and the ticket
//! describes the borrow itself, so that any server sharing the store can
//! poll it: one taken on server A can be waited on server B, and no
//! server keeps anything between polls.

use std::time::Duration;

use axum::Json;
use axum::response::Response;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use semaphore_core::{BorrowOptions, Pool, WaiterId};
use serde::{Deserialize, Serialize};

use crate::app::App;
use crate::error::ApiError;
use crate::ticket_answer::{granted, queued, unknown_ticket};
use crate::wire;

/// What tells a held ticket from a server-kept one (a bare UUID), with
/// the format's version.
const PREFIX: &str = "h1.";

/// The longest ticket text decoded: the fields with a 64-byte owner fit
/// well under it.
const MAX_LEN: usize = 512;

/// A two-phase borrow whose place a shared store keeps: the waiter id of
/// its place, and what to borrow when its turn comes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HeldTicket {
    /// The place's waiter id in the store's queue.
    #[serde(rename = "w")]
    pub(crate) waiter: uuid::Uuid,
    /// The lease's ttl, in ms, as clamped at enqueue.
    #[serde(rename = "t")]
    pub(crate) ttl_ms: u64,
    /// Slots in the lease (R15).
    #[serde(rename = "s")]
    pub(crate) slots: u32,
    /// The owner label.
    #[serde(rename = "o", default, skip_serializing_if = "Option::is_none")]
    pub(crate) owner: Option<String>,
    /// Keep the place while the pool drains.
    #[serde(rename = "d", default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) wait_while_draining: bool,
    /// The `Idempotency-Key`'s name, as kept with the lease (32 hex digits).
    #[serde(rename = "k", default, skip_serializing_if = "Option::is_none")]
    pub(crate) key: Option<String>,
    /// The request digest kept with the key.
    #[serde(rename = "b", default, skip_serializing_if = "Option::is_none")]
    pub(crate) digest: Option<uuid::Uuid>,
}

impl HeldTicket {
    /// The ticket's text: [`PREFIX`], then its fields as JSON in URL-safe
    /// base64 (no padding), so that it needs no escaping anywhere.
    pub(crate) fn encode(&self) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(json))
    }

    /// The ticket `text` describes, or `None` if it is not a held ticket
    /// (a server-kept ticket's UUID, or anything else).
    pub(crate) fn decode(text: &str) -> Option<Self> {
        let body = text
            .strip_prefix(PREFIX)
            .filter(|_| text.len() <= MAX_LEN)?;
        let json = URL_SAFE_NO_PAD.decode(body).ok()?;
        serde_json::from_slice(&json).ok()
    }

    /// Whether `text` is in the held tickets' format, valid or not.
    pub(crate) fn looks_held(text: &str) -> bool {
        text.starts_with(PREFIX)
    }

    pub(crate) fn waiter(&self) -> WaiterId {
        WaiterId::from_uuid(self.waiter)
    }

    pub(crate) fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms)
    }

    /// The borrow's options: unbound (the lease is the client's, R16).
    pub(crate) fn options(&self) -> BorrowOptions {
        let mut options = BorrowOptions::new()
            .bound(false)
            .wait_while_draining(self.wait_while_draining)
            .slots(self.slots);
        if let Some(owner) = &self.owner {
            options = options.owner(owner.clone());
        }
        if let Some(key) = &self.key {
            options = options.key(key.clone());
        }
        if let Some(digest) = self.digest {
            options = options.request_digest(digest.as_u128());
        }
        options
    }
}

/// The namespace of the waiter ids of keyed held tickets.
const KEYED_WAITERS: uuid::Uuid = uuid::Uuid::from_u128(0x2b7e_91c4_0d3a_4e6f_8a15_c9d2_7f40_b613);

/// `enqueue` on a shared store: the lease at once, or a held ticket. With
/// an `Idempotency-Key` (`keyed`), the place's waiter id comes from the
/// pool, the key and the request digest, so that a retried enqueue takes
/// the same place (the same ticket), and its lease is kept with the key.
pub(crate) async fn enqueue(
    app: &App,
    pool: &Pool,
    ttl: Duration,
    options: BorrowOptions,
    keyed: Option<crate::idempotency::Keyed>,
) -> Result<Response, ApiError> {
    let waiter = match &keyed {
        Some(k) => uuid::Uuid::new_v5(
            &KEYED_WAITERS,
            format!("{}:{}:{:032x}", pool.id().as_uuid(), k.name, k.digest).as_bytes(),
        ),
        None => *WaiterId::new().as_uuid(),
    };
    let ticket = HeldTicket {
        waiter,
        ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
        slots: options.slots,
        owner: options.owner.clone(),
        wait_while_draining: options.wait_while_draining,
        key: keyed.as_ref().map(|k| k.name.clone()),
        digest: keyed.as_ref().map(|k| uuid::Uuid::from_u128(k.digest)),
    };
    let options = ticket.options();
    let hold = app.tickets.hold();
    let taken = pool.wait_held(ticket.waiter(), hold, ttl, Duration::ZERO, options);
    if let Some(guard) = app.track(taken.await)? {
        return Ok(granted(app, &guard.forget()));
    }
    let place = app.track(pool.held_place(ticket.waiter()).await)?;
    if place.is_some_and(|place| place > crate::tickets::MAX_TICKETS_PER_POOL as u64) {
        // Past the pool's cap: the place goes, and nobody holds a ticket.
        app.track(pool.leave_held(ticket.waiter()).await)?;
        return Err(crate::tickets::too_many());
    }
    Ok(answer_queued_at(app, &ticket, place))
}

/// `wait` on a held ticket: polls its place for up to `wait`.
pub(crate) async fn wait(
    app: &App,
    pool: &Pool,
    ticket: &HeldTicket,
    wait: Duration,
) -> Result<Response, ApiError> {
    // A place no longer kept was served (its lease, answered again while
    // it is active), or dropped: its hold passed without a poll, it was
    // cancelled, or its lease was returned. Polling it would queue anew at
    // the back, which the client must choose to do.
    if app.track(pool.held_place(ticket.waiter()).await)?.is_none() {
        return match app.track(pool.held_lease(ticket.waiter(), &ticket.options()).await)? {
            Some(lease) => Ok(granted(app, &lease)),
            None => Err(unknown_ticket()),
        };
    }
    let (mut shutdown, mut draining) = (app.shutdown.clone(), app.draining.clone());
    let hold = app.tickets.hold();
    let poll = pool.wait_held(ticket.waiter(), hold, ticket.ttl(), wait, ticket.options());
    // A client that disconnects drops this future; the place is kept, and
    // a lease granted meanwhile is found again by the next poll (its key).
    let polled = tokio::select! {
        polled = poll => app.track(polled)?,
        _ = shutdown.wait_for(|down| *down) => return Err(ApiError::shutting_down()),
        _ = draining.wait_for(|on| *on) => return Err(ApiError::draining()),
    };
    match polled {
        Some(guard) => Ok(granted(app, &guard.forget())),
        None => answer_queued(app, pool, ticket).await,
    }
}

/// `cancel` of a held ticket: its place leaves the store's queue. A lease
/// already granted to a poll stays the client's.
pub(crate) async fn cancel(
    app: &App,
    pool: &Pool,
    ticket: &HeldTicket,
) -> Result<Json<wire::Cancelled>, ApiError> {
    let had = app.track(pool.held_place(ticket.waiter()).await)?.is_some();
    app.track(pool.leave_held(ticket.waiter()).await)?;
    Ok(Json(wire::Cancelled { cancelled: had }))
}

async fn answer_queued(app: &App, pool: &Pool, ticket: &HeldTicket) -> Result<Response, ApiError> {
    let place = app.track(pool.held_place(ticket.waiter()).await)?;
    Ok(answer_queued_at(app, ticket, place))
}

/// 202 with the ticket at `place`, just asked for: a place is there, unless
/// a poll on another server was granted meanwhile (the next poll answers
/// that lease).
fn answer_queued_at(app: &App, ticket: &HeldTicket, place: Option<u64>) -> Response {
    queued(
        app,
        ticket.encode(),
        usize::try_from(place.unwrap_or(1)).unwrap_or(usize::MAX),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_reads_back_as_written() {
        let ticket = HeldTicket {
            waiter: uuid::Uuid::new_v4(),
            ttl_ms: 90_000,
            slots: 2,
            owner: Some("job 7/a".into()),
            wait_while_draining: true,
            key: Some("0f".repeat(16)),
            digest: Some(uuid::Uuid::new_v4()),
        };
        let text = ticket.encode();
        assert!(HeldTicket::looks_held(&text));
        assert!(
            text.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        );
        assert_eq!(HeldTicket::decode(&text), Some(ticket));
    }

    #[test]
    fn junk_is_no_ticket() {
        for text in [
            "",
            "h1.",
            "h1.!!!",
            "h1.e30",
            "6f1c0b1e-8f0e-4c4e-9a55-1f0d2a7f3b11",
            &format!("h1.{}", "A".repeat(600)),
        ] {
            assert_eq!(HeldTicket::decode(text), None, "{text:?}");
        }
    }
}
