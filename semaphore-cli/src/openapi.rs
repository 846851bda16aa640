//! The OpenAPI document of the service (utoipa), served at
//! `/openapi.json` and pinned by a committed snapshot
//! (`semaphore-cli/openapi.json`, checked by `tests/openapi.rs`).

use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityRequirement, SecurityScheme};
use utoipa::{Modify, OpenApi};

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
        wire::Enqueue,
        wire::Wait,
        wire::Cancel,
        wire::Queued,
        wire::Cancelled,
        wire::State,
        wire::Granted,
        wire::Holder,
        wire::Holders,
        wire::Deleted,
        wire::Returned,
        wire::Status,
        error::ErrorBody,
    )),
    modifiers(&BearerAuth)
)]
pub(crate) struct ApiDoc;

/// The optional bearer auth of `--auth-token-file`: without it every
/// route is open (the pool UUID is the secret); with it, every route but
/// `/healthz` and `/readyz` answers 401 with the error body unless the
/// request bears the token.
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let mut scheme = Http::new(HttpAuthScheme::Bearer);
        scheme.description = Some(
            "Only when the server runs with --auth-token-file: then every route but \
             /healthz and /readyz answers 401 with the error body without it."
                .into(),
        );
        if let Some(components) = openapi.components.as_mut() {
            components.add_security_scheme("bearer", SecurityScheme::Http(scheme));
        }
        // Either no auth (the default) or the bearer token.
        openapi.security = Some(vec![
            SecurityRequirement::default(),
            SecurityRequirement::new("bearer", Vec::<String>::new()),
        ]);
    }
}

/// `document` as pretty JSON, as served and as committed.
pub(crate) fn pretty(document: &utoipa::openapi::OpenApi) -> String {
    document
        .to_pretty_json()
        .unwrap_or_else(|e| format!("{{\"error\": \"the OpenAPI document failed: {e}\"}}"))
}
