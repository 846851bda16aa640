//! `GET /l?after=ID&limit=N`: the store's pools, a page at a time, in id
//! order (rule "Listing pools"; [`Pool::list`]).
//!
//! A pool's id is its only credential when the server has no bearer token,
//! so the listing, which shows every id, is answered only to callers that
//! could read the ids anyway: with `--auth-token-file` (each request then
//! bears the token), or on a server that listens on a loopback address
//! only (this machine's users) to a request no proxy forwarded (one with
//! `Forwarded`, `X-Forwarded-For` or `X-Real-IP` came from further away).
//! Else it is 403, and says how to enable it. On a machine shared with
//! users who must not borrow each other's pools, use the token.
//!
//! A page of 1000 pools costs the store some 15 borrows' work, so one
//! listing runs at a time: more wait their turn, and borrows go on.

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use semaphore_core::store::MAX_PAGE;
use semaphore_core::{Pool, PoolId};

use crate::app::App;
use crate::error::ApiError;
use crate::wire;

/// A page's length when the query names none.
const DEFAULT_LIMIT: u32 = 100;

/// The query's `after` and `limit`.
fn query(raw: Option<&str>) -> Result<(Option<PoolId>, u32), ApiError> {
    let (mut after, mut limit) = (None, DEFAULT_LIMIT);
    let mut named = Vec::new();
    for (name, value) in form_urlencoded::parse(raw.unwrap_or_default().as_bytes()) {
        if named.contains(&name) {
            let shown: String = name.chars().take(16).collect();
            return Err(ApiError::bad_request(
                format!("{shown} is named twice"),
                None,
            ));
        }
        named.push(name.clone());
        match &*name {
            "after" => after = Some(PoolId::from_uuid(wire::uuid("after", &value)?)),
            "limit" => {
                limit = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_PAGE).contains(n))
                    .ok_or_else(|| {
                        let shown: String = value.chars().take(16).collect();
                        ApiError::bad_request(
                            format!(
                                "limit must be a whole number in 1..={MAX_PAGE}, not {shown:?}"
                            ),
                            Some("limit"),
                        )
                    })?;
            }
            _ => {
                let shown: String = name.chars().take(16).collect();
                return Err(ApiError::bad_request(
                    format!("unknown query parameter {shown:?}: the listing takes after and limit"),
                    None,
                ));
            }
        }
    }
    Ok((after, limit))
}

/// The pools after `after` (an id; from the first without it), at most
/// `limit` (1 to 1000, default 100), in id order, each with who waits
/// for it here; `next` is the id to pass as `after` for the next page:
/// `null` when this page was not full (it was the last); a full page's
/// `next` may lead to an empty one.
#[utoipa::path(get, path = "/l", tag = "pools",
    params(
        ("after" = Option<uuid::Uuid>, Query, description = "List the pools whose id follows this one (by its bytes)"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000, description = "The most pools listed (default 100)"),
    ),
    responses(
        (status = 200, description = "A page of pools, in id order", body = wire::Page),
        (status = 400, description = "Bad input", body = crate::error::ErrorBody),
        (status = 403, description = "Listing shows every pool's id: the server needs a bearer token (--auth-token-file) or a loopback address", body = crate::error::ErrorBody),
        (status = 502, description = "The store failed", body = crate::error::ErrorBody),
    ))]
pub(crate) async fn list(
    State(app): State<App>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Json<wire::Page>, ApiError> {
    let forwarded = ["forwarded", "x-forwarded-for", "x-real-ip"]
        .iter()
        .any(|name| headers.contains_key(*name));
    if !app.auth && (!app.loopback || forwarded) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "listing_refused",
            "listing shows every pool's id, which is its only credential on a server \
             without a bearer token: start semaphore serve with --auth-token-file, \
             or listen on a loopback address and ask it directly (not through a proxy)",
        )
        .not_retryable());
    }
    let (after, limit) = query(raw.as_deref())?;
    let _turn = app
        .listings
        .acquire()
        .await
        .map_err(|_| ApiError::shutting_down())?;
    let states = app.track(Pool::list(&app.store, after, limit).await)?;
    let full = states.len() == limit as usize;
    let next = states.last().filter(|_| full).map(|s| s.id.to_string());
    let now = app.now();
    let mut pools = Vec::with_capacity(states.len());
    for state in states {
        let waiting = app.track(app.pool(state.id).waiting_everywhere(&state, now).await)?;
        pools.push(wire::State::of(state, waiting));
    }
    Ok(Json(wire::Page { pools, next }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_names_after_and_limit_in_range() {
        assert_eq!(query(None).unwrap(), (None, DEFAULT_LIMIT));
        let id = PoolId::from_name("gpus");
        assert_eq!(
            query(Some(&format!("after={id}&limit=5"))).unwrap(),
            (Some(id), 5)
        );
        for bad in [
            "limit=0",
            "limit=1001",
            "limit=x",
            "after=nope",
            "other=1",
            "limit=1&limit=2",
        ] {
            assert!(query(Some(bad)).is_err(), "{bad}");
        }
    }
}
