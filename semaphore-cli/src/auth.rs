//! Optional bearer auth (`semaphore serve --auth-token-file FILE`): every
//! request but `/healthz` and `/readyz` must carry `Authorization: Bearer
//! <token>`, compared in constant time (`subtle`); else 401 with the seed's
//! JSON error. The token is read from a file, never the command line (which
//! every user of the machine can read in `ps`), and never logged.

use std::path::Path;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use crate::error::ApiError;
use crate::exit::{Exit, code};

/// The token every request must bear.
#[derive(Clone)]
pub(crate) struct Token(Arc<[u8]>);

impl Token {
    /// The token in `path`: its text without surrounding whitespace, 16 to
    /// 4096 visible ASCII characters (what a header carries unchanged).
    ///
    /// # Errors
    /// Exit 66 if the file cannot be read, 64 if its token is unusable.
    pub(crate) fn read(path: &Path) -> Result<Self, Exit> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Exit::new(
                code::NOINPUT,
                format!("reading --auth-token-file {}: {e}", path.display()),
            )
        })?;
        let token = text.trim();
        if !(16..=4096).contains(&token.len()) || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Exit::new(
                code::USAGE,
                format!(
                    "--auth-token-file {}: the token must be 16 to 4096 visible ASCII \
                     characters (e.g. openssl rand -hex 32)",
                    path.display()
                ),
            ));
        }
        Ok(Self(token.as_bytes().into()))
    }

    /// Whether `request` bears this token.
    fn borne_by(&self, request: &Request) -> bool {
        let Some(value) = request.headers().get(header::AUTHORIZATION) else {
            return false;
        };
        let Some(given) = value.as_bytes().strip_prefix(b"Bearer ") else {
            return false;
        };
        bool::from(given.ct_eq(&self.0))
    }
}

/// The middleware: the probes pass, everything else needs the token.
pub(crate) async fn require(State(token): State<Token>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    if path == "/healthz" || path == "/readyz" || token.borne_by(&request) {
        return next.run(request).await;
    }
    let mut answer = ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "this server needs Authorization: Bearer <token> (the token of --auth-token-file)",
    )
    .into_response();
    answer.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer"),
    );
    answer
}
