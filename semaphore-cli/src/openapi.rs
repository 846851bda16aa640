//! The OpenAPI document of the service (utoipa), served at
//! `/openapi.json` and pinned by a committed snapshot
//! (`semaphore-cli/openapi.json`, checked by `tests/openapi.rs`).

use utoipa::OpenApi;

use crate::{error, wire};

/// The service's API: its info and schemas; the paths are added by the
/// router, from the same list that routes them (`api::router`).
#[derive(OpenApi)]
#[openapi(
    info(
        title = "semaphore",
        description = "Numbered-slot semaphores with leases over HTTP: register a pool of \
            `count` slots under a secret UUID, borrow the lowest free slot for a ttl \
            (optionally waiting), return it early or let it expire. Times are seconds.",
        license(name = "MIT OR Apache-2.0")
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

/// `document` as pretty JSON, as served and as committed.
pub(crate) fn pretty(document: &utoipa::openapi::OpenApi) -> String {
    document
        .to_pretty_json()
        .unwrap_or_else(|e| format!("{{\"error\": \"the OpenAPI document failed: {e}\"}}"))
}
