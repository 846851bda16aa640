//! The OpenAPI document of the service (utoipa), served at
//! `/openapi.json` and pinned by a committed snapshot
//! (`semaphore-cli/openapi.json`, checked by `tests/openapi.rs`).

use utoipa::OpenApi;

use crate::{api, error, wire};

/// The service's API.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "semaphore",
        description = "Numbered-slot semaphores with leases over HTTP: register a pool of \
            `count` slots under a secret UUID, borrow the lowest free slot for a ttl \
            (optionally waiting), return it early or let it expire. Times are seconds.",
        license(name = "MIT OR Apache-2.0")
    ),
    paths(
        api::register,
        api::inspect,
        api::delete,
        api::borrow,
        api::return_lease,
        api::renew,
        api::holders,
        api::healthz,
        api::readyz,
        api::metrics,
    ),
    components(schemas(
        wire::Register,
        wire::Borrow,
        wire::Return,
        wire::Renew,
        wire::State,
        wire::Granted,
        wire::Holder,
        wire::Holders,
        wire::Deleted,
        wire::Returned,
        wire::Status,
        error::ErrorBody,
    ))
)]
pub(crate) struct ApiDoc;

/// The document as pretty JSON, as served and as committed.
pub(crate) fn document() -> String {
    ApiDoc::openapi()
        .to_pretty_json()
        .unwrap_or_else(|e| format!("{{\"error\": \"the OpenAPI document failed: {e}\"}}"))
}
