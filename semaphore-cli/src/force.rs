//! `POST /l/{id}/force-return`: an operator ends the lease holding a
//! position, as a return would
//! ([`Pool::force_return`](semaphore_core::Pool::force_return)), e.g. from
//! the service's page. An act, so it needs the bearer token: a server without
//! `--auth-token-file` refuses it (rule "A page for people": any act
//! needs the bearer token).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::app::App;
use crate::error::ApiError;
use crate::extract::{JsonObject, PoolPath};

/// `{"position": n}`: any position of the lease to end.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ForceReturn {
    pub(crate) position: u32,
}

/// Whether a lease held the position, and the one it ended: its
/// positions, token and owner (never its lease id).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ForceReturned {
    returned: bool,
    positions: Vec<u32>,
    token: Option<u64>,
    owner: Option<String>,
}

/// Ends the lease holding `position`, if one is active; its holder finds
/// its lease gone at its next renewal or return.
#[utoipa::path(post, path = "/l/{id}/force-return", tag = "leases",
    params(("id" = uuid::Uuid, Path, description = "The pool's secret UUID")),
    request_body = ForceReturn,
    responses(
        (status = 200, description = "Whether a lease held the position, and the lease ended", body = ForceReturned),
        (status = 400, description = "Bad input", body = crate::error::ErrorBody),
        (status = 403, description = "The server has no bearer token (--auth-token-file): it takes no act from a page", body = crate::error::ErrorBody),
        (status = 404, description = "No such pool", body = crate::error::ErrorBody),
        (status = 502, description = "The store failed", body = crate::error::ErrorBody),
    ))]
pub(crate) async fn force_return(
    State(app): State<App>,
    PoolPath(id): PoolPath,
    JsonObject(request): JsonObject<ForceReturn>,
) -> Result<Json<ForceReturned>, ApiError> {
    if !app.auth {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "needs_auth",
            "a forced return needs the server's bearer token: start semaphore serve \
             with --auth-token-file",
        )
        .not_retryable());
    }
    let ended = app.track(app.pool(id).force_return(request.position).await)?;
    Ok(Json(match ended {
        Some(h) => ForceReturned {
            returned: true,
            positions: h.lease.positions.to_vec(),
            token: Some(h.lease.token),
            owner: h.owner,
        },
        None => ForceReturned {
            returned: false,
            positions: Vec::new(),
            token: None,
            owner: None,
        },
    }))
}
