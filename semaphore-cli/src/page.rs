//! The page at `/` of `semaphore serve` (rule "A page for people"): what
//! an operator looks at, as RabbitMQ's management page and Sidekiq's web
//! UI are. The pools with their fill; one pool's slots as numbered cells
//! (owner, token, a ttl that counts down), its waiters in line, its drain;
//! live, asking the API once a second.
//!
//! Three files built into the binary (`semaphore-cli/page/`): no build
//! step, no CDN. They hold no data, so they are served without the bearer
//! token; the page's script asks the API for everything, with the token
//! the user gives it when the server has one. Every label is set as text
//! (`textContent`), never as markup, and the content security policy
//! allows no script but `/page.js`: a label that is markup shows as text.
//! The page only reads, but for a forced return, which needs the token.

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::app::App;

const INDEX: &str = include_str!("../page/index.html");
const SCRIPT: &str = include_str!("../page/page.js");
const STYLE: &str = include_str!("../page/page.css");

/// No script, style or connection but this server's, no frames, no forms.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";

/// Whether `path` is one of the page's files.
pub(crate) fn is_asset(path: &str) -> bool {
    matches!(path, "/" | "/page.js" | "/page.css")
}

/// `router` with the page's three files.
pub(crate) fn routes(router: Router<App>) -> Router<App> {
    router
        .route(
            "/",
            get(|| async { file("text/html; charset=utf-8", INDEX) }),
        )
        .route(
            "/page.js",
            get(|| async { file("text/javascript; charset=utf-8", SCRIPT) }),
        )
        .route(
            "/page.css",
            get(|| async { file("text/css; charset=utf-8", STYLE) }),
        )
}

/// One of the files, with the headers that keep it to itself.
fn file(kind: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(kind)),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(POLICY),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (
                header::REFERRER_POLICY,
                HeaderValue::from_static("no-referrer"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        body,
    )
        .into_response()
}
