//! Headers the server acts on must come once: with two `Authorization`
//! headers the first one was checked and the second ignored, and a proxy or a cache in front may have taken the
//! other one. So a request that repeats one of [`SINGLE`] is answered 400
//! `duplicate_header` naming it, before auth and before any route.

use axum::extract::Request;
use axum::http::{HeaderName, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// The headers a request may carry at most once, as the answer names them.
static SINGLE: [(HeaderName, &str); 4] = [
    (header::AUTHORIZATION, "Authorization"),
    (header::CONTENT_TYPE, "Content-Type"),
    (
        HeaderName::from_static("idempotency-key"),
        "Idempotency-Key",
    ),
    (header::HOST, "Host"),
];

/// The middleware: 400 `duplicate_header` for a request that repeats a
/// header of [`SINGLE`], with the header's name in `field`; else the
/// request goes on.
pub(crate) async fn refuse_repeats(request: Request, next: Next) -> Response {
    let headers = request.headers();
    let repeated = SINGLE
        .iter()
        .find(|(name, _)| headers.get_all(name).iter().nth(1).is_some());
    match repeated {
        None => next.run(request).await,
        Some((_, shown)) => ApiError::new(
            StatusCode::BAD_REQUEST,
            "duplicate_header",
            format!("the request has more than one {shown} header: send it once"),
        )
        .with_field(shown)
        .into_response(),
    }
}
