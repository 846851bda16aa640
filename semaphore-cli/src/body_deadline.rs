//! A deadline on each request's body (issue 38, item 2).
//!
//! `--header-timeout` bounds a request's head only: a client that sends a
//! complete head with `Content-Length: 100` and then one byte would hold
//! its connection for as long as it liked, and 1,024 such clients (the
//! default `--max-connections`) would lock every other client out. So every
//! body (the API's are a few dozen bytes, [`BODY_LIMIT`] at most) is read
//! whole within `--body-timeout` of the end of its head, before the route
//! runs, including a body sent to a route that takes none. Past the
//! deadline the answer is 408 `body_timeout`, and the connection closes.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};

use crate::error::ApiError;
use crate::extract::BODY_LIMIT;

/// Reads the body of `request` within `limit`, then runs the route on it.
pub(crate) async fn read_within(
    State(limit): State<Duration>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    let read = Limited::new(body, BODY_LIMIT).collect();
    let refused = match tokio::time::timeout(limit, read).await {
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
    // The rest of the body is never read: the connection cannot carry
    // another request.
    let mut response = refused.into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}
