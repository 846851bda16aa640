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
        wire::Page,
        wire::Granted,
        wire::Holder,
        wire::Holders,
        wire::Waiter,
        crate::force::ForceReturn,
        crate::force::ForceReturned,
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

/// `document` with the answers of the layers around the routes on its
/// operations: `401` on every one but the probes' (`/healthz`, `/readyz`),
/// what a server run with `--auth-token-file` answers a request without
/// the token; `408` on every one, a body that did not
/// arrive within `--body-timeout`; `503` on every one, a body
/// that did not come with its head while `--max-pending-bodies` are
/// waited for; `400` on every one, a
/// header sent twice; `421` on every one but the probes', a host the
/// server is not known as. An answer a route declares
/// already gets the layer's reason added to its description.
pub(crate) fn with_layer_answers(
    mut document: utoipa::openapi::OpenApi,
) -> utoipa::openapi::OpenApi {
    use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
    let error = |description: &str| {
        ResponseBuilder::new()
            .description(description)
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("ErrorBody")))
                    .build(),
            )
            .build()
    };
    let unauthorized = error(
        "Only when the server runs with --auth-token-file: the request did not bear \
         `Authorization: Bearer <token>`.",
    );
    let slow = error(
        "The body did not arrive within --body-timeout (`body_timeout`); the connection \
         closes.",
    );
    let repeated = error(
        "A header the server acts on (Authorization, Content-Type, Idempotency-Key, Host) \
         came more than once (`duplicate_header`, naming it in `field`).",
    );
    let misdirected = error(
        "The request's host is none this server answers to (`misdirected_host`): \
         localhost, 127.0.0.1, [::1], the --listen address, or an --allowed-host.",
    );
    let slow_bodies = error(
        "The body did not come with its head while the server waits for \
         --max-pending-bodies others (`too_many_slow_bodies`); the connection closes.",
    );
    for (path, item) in document.paths.paths.iter_mut() {
        let probe = path == "/healthz" || path == "/readyz";
        for operation in [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
        ]
        .into_iter()
        .flatten()
        {
            let responses = &mut operation.responses.responses;
            if !probe {
                responses
                    .entry("401".to_string())
                    .or_insert_with(|| unauthorized.clone().into());
                add_answer(responses, "421", &misdirected);
            }
            responses
                .entry("408".to_string())
                .or_insert_with(|| slow.clone().into());
            add_answer(responses, "400", &repeated);
            add_answer(responses, "503", &slow_bodies);
        }
    }
    document
}

/// Adds `answer` under `status`: as it is if the route declares no answer
/// with that status, else its description after the route's own.
fn add_answer(
    responses: &mut std::collections::BTreeMap<
        String,
        utoipa::openapi::RefOr<utoipa::openapi::Response>,
    >,
    status: &str,
    answer: &utoipa::openapi::Response,
) {
    use std::collections::btree_map::Entry;
    use utoipa::openapi::RefOr;
    match responses.entry(status.to_string()) {
        Entry::Vacant(entry) => {
            entry.insert(answer.clone().into());
        }
        Entry::Occupied(mut entry) => {
            if let RefOr::T(declared) = entry.get_mut() {
                let mut reason = answer.description.chars();
                let first = reason.next().map(|c| c.to_ascii_lowercase());
                declared.description = format!(
                    "{}; or {}{}",
                    declared.description.trim_end_matches('.'),
                    first.map(String::from).unwrap_or_default(),
                    reason.as_str()
                );
            }
        }
    }
}

/// `document` as pretty JSON, as served and as committed.
pub(crate) fn pretty(document: &utoipa::openapi::OpenApi) -> String {
    document
        .to_pretty_json()
        .unwrap_or_else(|e| format!("{{\"error\": \"the OpenAPI document failed: {e}\"}}"))
}
