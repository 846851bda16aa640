//! Errors on the wire: the seed's `{"error": "..."}` body with its status,
//! plus `code`, `field` and `retryable`, and `Retry-After` on 409, 502 and
//! 503.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use semaphore_memory::Error;
use serde::Serialize;
use utoipa::ToSchema;

/// An error answer.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    body: ErrorBody,
}

/// Every error: the seed's `{"error": "..."}`, then what a client acts on.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ErrorBody {
    /// What went wrong, for people.
    error: String,
    /// What went wrong, for programs: `bad_request`, `not_found`,
    /// `exhausted`, `lease_not_active`, `too_large`,
    /// `unsupported_media_type`, `method_not_allowed`, `no_route`,
    /// `idempotency_key_reused`, `storage`, `store_broken`,
    /// `shutting_down`, `internal`.
    code: &'static str,
    /// The request field at fault, for `bad_request`.
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<&'static str>,
    /// Whether the same request may succeed later.
    retryable: bool,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, error: impl Into<String>) -> Self {
        let retryable = matches!(
            status,
            StatusCode::CONFLICT | StatusCode::BAD_GATEWAY | StatusCode::SERVICE_UNAVAILABLE
        );
        Self {
            status,
            body: ErrorBody {
                error: error.into(),
                code,
                field: None,
                retryable,
            },
        }
    }

    pub(crate) fn bad_request(error: impl Into<String>, field: Option<&'static str>) -> Self {
        let mut e = Self::new(StatusCode::BAD_REQUEST, "bad_request", error);
        e.body.field = field;
        e
    }

    pub(crate) fn shutting_down() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the server is shutting down; retry on another",
        )
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        match e {
            Error::InvalidArgument { field, .. } => Self::bad_request(e.to_string(), Some(field)),
            Error::PoolNotFound { .. } => {
                Self::new(StatusCode::NOT_FOUND, "not_found", "no such pool")
            }
            Error::Exhausted { .. } => {
                Self::new(StatusCode::CONFLICT, "exhausted", "no resource available")
            }
            Error::LeaseExpired { .. } | Error::LeaseNotFound { .. } => {
                Self::new(StatusCode::NOT_FOUND, "lease_not_active", e.to_string())
            }
            // The engine's own words may name files, hosts or schemas:
            // they go to the server's log, not to clients.
            Error::Storage {
                operation,
                retryable,
                ..
            } => {
                eprintln!("semaphore serve: {e}");
                let mut err = Self::new(
                    StatusCode::BAD_GATEWAY,
                    "storage",
                    format!(
                        "the store failed during {operation} ({}); the server's log has the details",
                        if retryable {
                            "retryable"
                        } else {
                            "not retryable"
                        }
                    ),
                );
                err.body.retryable = retryable;
                err
            }
            other => {
                eprintln!("semaphore serve: {other}");
                Self::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "internal error; the server's log has the details",
                )
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let retry = self.body.retryable;
        let mut response = (self.status, Json(self.body)).into_response();
        if retry {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}
