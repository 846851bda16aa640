//! Errors on the wire: the seed's `{"error": "..."}` body with its status,
//! plus `code`, `field` and `retryable`, and `Retry-After` on 409, 502 and
//! 503.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use semaphore_core::Error;
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
    /// `idempotency_key_reused`, `ticket_not_found`, `too_many_tickets`,
    /// `body_timeout`, `too_many_slow_bodies`, `duplicate_header`,
    /// `misdirected_host`,
    /// `storage`, `store_broken`, `clock_skew`, `schema_mismatch`,
    /// `draining`, `pool_draining`, `shutting_down`, `unauthorized`,
    /// `internal`.
    code: &'static str,
    /// The request field at fault, for `bad_request`; the header sent
    /// twice, for `duplicate_header`.
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

    /// The same error, naming `field` (a body field, or a header's name)
    /// as the one at fault.
    pub(crate) fn with_field(mut self, field: &'static str) -> Self {
        self.body.field = Some(field);
        self
    }

    /// The same error, saying that a retry will not help.
    pub(crate) fn not_retryable(mut self) -> Self {
        self.body.retryable = false;
        self
    }

    pub(crate) fn bad_request(error: impl Into<String>, field: Option<&'static str>) -> Self {
        let mut e = Self::new(StatusCode::BAD_REQUEST, "bad_request", error);
        e.body.field = field;
        e
    }

    /// The server drains (SIGUSR1): it grants nothing new.
    pub(crate) fn draining() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "draining",
            "this server is draining: it grants nothing new, while returns and renewals go \
             on; retry on another server",
        )
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
            Error::Draining { .. } => {
                let mut err = Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "pool_draining",
                    "this pool is draining: it grants nothing new, while returns and renewals \
                     go on; retry once it is un-drained",
                );
                err.body.retryable = true;
                err
            }
            Error::KeyReused { .. } => Self::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency_key_reused",
                "this Idempotency-Key was used with a different request body; use a new key \
                 for a new request",
            ),
            Error::LeaseExpired { .. } | Error::LeaseNotFound { .. } => Self::new(
                StatusCode::NOT_FOUND,
                "lease_not_active",
                "lease is not active: returned, expired, or never this pool's",
            ),
            // The engine's own words may name files, hosts or schemas:
            // they go to the server's log, not to clients.
            Error::Storage {
                operation,
                retryable,
                ..
            } => {
                eprintln!("semaphore serve: {}", e.chain());
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
            // The operator's to fix; no retry helps until then.
            Error::ClockSkew { .. } | Error::SchemaMismatch { .. } => {
                eprintln!("semaphore serve: {}", e.chain());
                let (code, error) = match e {
                    Error::ClockSkew { .. } => (
                        "clock_skew",
                        "this server's clock disagrees with the store's; its operator must fix the clock",
                    ),
                    _ => (
                        "schema_mismatch",
                        "the store's tables are of another version or shape; its operator must migrate or choose another schema",
                    ),
                };
                let mut err = Self::new(StatusCode::SERVICE_UNAVAILABLE, code, error);
                err.body.retryable = false;
                err
            }
            other => {
                eprintln!("semaphore serve: {}", other.chain());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operator_problems_are_503_with_their_own_codes_and_not_retryable() {
        let skew = Error::ClockSkew {
            skew: std::time::Duration::from_secs(40),
            ahead: true,
            tolerance: std::time::Duration::from_secs(5),
            reference: "machine's clock",
        };
        let mismatch = Error::SchemaMismatch {
            expected: "v2".into(),
            found: "v9".into(),
        };
        for (e, code) in [(skew, "clock_skew"), (mismatch, "schema_mismatch")] {
            let err = ApiError::from(e);
            assert_eq!(err.status, StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(err.body.code, code);
            assert!(!err.body.retryable);
            let response = err.into_response();
            assert!(response.headers().get(header::RETRY_AFTER).is_none());
        }
    }
}
