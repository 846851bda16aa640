//! Extractors for the routes: the pool named by the
//! path, and a JSON object body, each rejected with the seed's JSON error
//! rather than axum's plain-text one.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use semaphore_core::PoolId;

use crate::error::ApiError;
use crate::wire;

/// The largest request body accepted: the seed's bodies are a few dozen
/// bytes.
pub(crate) const BODY_LIMIT: usize = 64 * 1024;

/// The pool of a `/l/{id}` route: `{id}` must be a UUID (400 otherwise,
/// echoing at most 64 characters of it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PoolPath(pub(crate) PoolId);

impl<S: Send + Sync> FromRequestParts<S> for PoolPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(id) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|_| ApiError::bad_request("the path has no pool id", Some("id")))?;
        Ok(PoolPath(PoolId::from_uuid(wire::uuid("id", &id)?)))
    }
}

/// A body that must be a JSON object of type `T`: another content type is
/// a 415, a body over [`BODY_LIMIT`] a 413, anything but an object of the
/// right fields a 400.
#[derive(Debug)]
pub(crate) struct JsonObject<T>(pub(crate) T);

impl<S, T> FromRequest<S> for JsonObject<T>
where
    S: Send + Sync,
    T: serde::de::DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let headers = request.headers().clone();
        let body = Bytes::from_request(request, state).await;
        Ok(JsonObject(wire::parse(&json_body(&headers, body)?)?))
    }
}

/// The body of a request that must be JSON: refuses another content type,
/// and a body sent without one (415: a browser posts a form or `text/plain`
/// from any page without asking first, rule "HTTP"), and a body over
/// the limit (413).
fn json_body(headers: &HeaderMap, body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    let Some(kind) = headers.get(header::CONTENT_TYPE) else {
        let body = body.map_err(too_large)?;
        if body.is_empty() {
            return Ok(body);
        }
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "the body must be JSON: send Content-Type: application/json".to_string(),
        ));
    };
    let kind = kind.to_str().unwrap_or("");
    {
        let essence = kind
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        if essence != "application/json" && !essence.ends_with("+json") {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                format!("the body must be JSON: send Content-Type: application/json, not {kind:?}"),
            ));
        }
    }
    body.map_err(too_large)
}

/// A body that could not be read: too large (413), or cut short (400).
fn too_large(e: BytesRejection) -> ApiError {
    let status = e.status();
    let code = if status == StatusCode::PAYLOAD_TOO_LARGE {
        "too_large"
    } else {
        "bad_request"
    };
    ApiError::new(
        status,
        code,
        format!("cannot read the body (at most {BODY_LIMIT} bytes): {e}"),
    )
}
