//! A deadline on each request's body.
//!
//! `--header-timeout` bounds a request's head only: a client that sends a
//! complete head with `Content-Length: 100` and then one byte would hold
//! its connection for as long as it liked, and 1,024 such clients (the
//! default `--max-connections`) would lock every other client out. So every
//! body (the API's are a few dozen bytes, [`BODY_LIMIT`] at most) is read
//! whole within `--body-timeout` of the end of its head, before the route
//! runs, including a body sent to a route that takes none. Past the
//! deadline the answer is 408 `body_timeout`, and the connection closes.
//!
//! The deadline alone still let one client lock the others out:
//! re-opening 1,024 half-sent bodies every 10 s kept every connection
//! busy. So a body that has not come whole with
//! its head must also take a place among the `--max-pending-bodies`
//! (a quarter of `--max-connections` by default) waited for at once; with
//! none free it is answered 503 `too_many_slow_bodies` at once and its
//! connection closes. A body that comes with its head (the API's always
//! fit in one packet) is read without a place, so slow clients can hold
//! at most that share of the connections, however many they open. And one
//! client address holds at most half of those places ([`PeerAddr`], set
//! by the accept loop), so that it cannot take every place from the
//! others, whose bodies come a moment after their heads (rule "A default
//! server serves everyone").

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};

use tokio::sync::Semaphore;

use crate::error::ApiError;
use crate::extract::BODY_LIMIT;

/// The client address a request came from, which the accept loop puts in
/// each request's extensions.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PeerAddr(pub(crate) IpAddr);

/// How bodies are read: within `timeout` of the end of their head, and at
/// most `pending` of them waited for at once, at most half of those from
/// one client address.
#[derive(Debug, Clone)]
pub(crate) struct BodyLimits {
    timeout: Duration,
    /// The places of the bodies waited for (`--max-pending-bodies`).
    pending: Arc<Semaphore>,
    cap: usize,
    /// The places each client address holds.
    held: Arc<parking_lot::Mutex<HashMap<IpAddr, usize>>>,
}

/// One place held by a client address; given back when dropped.
struct AddressPlace {
    held: Arc<parking_lot::Mutex<HashMap<IpAddr, usize>>>,
    peer: IpAddr,
}

impl Drop for AddressPlace {
    fn drop(&mut self) {
        let mut held = self.held.lock();
        if let Some(n) = held.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.peer);
            }
        }
    }
}

impl BodyLimits {
    /// Bodies read within `timeout`, at most `cap` (at least 1) waited
    /// for at once.
    pub(crate) fn new(timeout: Duration, cap: usize) -> Self {
        let cap = cap.max(1);
        Self {
            timeout,
            pending: Arc::new(Semaphore::new(cap)),
            cap,
            held: Arc::default(),
        }
    }

    /// A place for a body from `peer`, if it holds fewer than half of the
    /// places (at least one).
    fn address_place(&self, peer: Option<PeerAddr>) -> Option<Option<AddressPlace>> {
        let Some(PeerAddr(peer)) = peer else {
            return Some(None);
        };
        let mut held = self.held.lock();
        let n = held.entry(peer).or_default();
        if *n >= (self.cap / 2).max(1) {
            return None;
        }
        *n += 1;
        Some(Some(AddressPlace {
            held: self.held.clone(),
            peer,
        }))
    }
}

/// Reads the body of `request` within the limits, then runs the route on
/// it: at once if it came with its head; else with a place among the
/// bodies waited for, or 503 `too_many_slow_bodies` if none is free.
pub(crate) async fn read_within(
    State(limits): State<BodyLimits>,
    request: Request,
    next: Next,
) -> Response {
    let limit = limits.timeout;
    let peer = request.extensions().get::<PeerAddr>().copied();
    let (parts, body) = request.into_parts();
    let read = Limited::new(body, BODY_LIMIT).collect();
    let mut read = pin!(tokio::time::timeout(limit, read));
    // One look: a body that came with its head is there already.
    let at_once = std::future::poll_fn(|cx| Poll::Ready(read.as_mut().poll(cx))).await;
    let read = match at_once {
        Poll::Ready(read) => read,
        Poll::Pending => {
            let Some(address) = limits.address_place(peer) else {
                return closing(too_many(limits.cap));
            };
            match limits.pending.clone().try_acquire_owned() {
                Ok(place) => {
                    let read = read.await;
                    drop((place, address));
                    read
                }
                Err(_) => return closing(too_many(limits.cap)),
            }
        }
    };
    let refused = match read {
        Ok(Ok(body)) => {
            let request = Request::from_parts(parts, Body::from(body.to_bytes()));
            return next.run(request).await;
        }
        Ok(Err(e)) if e.is::<LengthLimitError>() => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("the body is over the limit: send at most {BODY_LIMIT} bytes"),
        ),
        Ok(Err(e)) => ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("cannot read the body: {e}"),
        ),
        Err(_) => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "body_timeout",
            format!(
                "the body did not arrive within {} (--body-timeout): send the whole \
                 body with the head",
                humantime::format_duration(limit)
            ),
        ),
    };
    closing(refused)
}

/// 503 `too_many_slow_bodies`: `cap` bodies are waited for already, or
/// half of them from this client's address.
fn too_many(cap: usize) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "too_many_slow_bodies",
        format!(
            "the server already waits for as many request bodies that did not come with \
             their heads as it allows (--max-pending-bodies {cap}, at most half of them from \
             one address): send the whole body with the head, or retry"
        ),
    )
}

/// `refused` as an answer that closes the connection: the rest of the
/// body is never read, so the connection cannot carry another request.
fn closing(refused: ApiError) -> Response {
    let mut response = refused.into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}
