//! Optional bearer auth (`semaphore serve --auth-token-file FILE`): every
//! request but `/healthz`, `/readyz` and the page's files (`/`,
//! `/page.js`, `/page.css`) must carry `Authorization: Bearer
//! <token>`, compared in constant time (`subtle`); else 401 with the seed's
//! JSON error. The token is read from a file, never the command line (which
//! every user of the machine can read in `ps`), and never logged; SIGHUP
//! reads the file again (a rotated token takes effect without a restart).

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use crate::error::ApiError;
use crate::exit::{Exit, code};

/// The token every request must bear, and the file it came from.
#[derive(Clone)]
pub(crate) struct Token {
    current: Arc<RwLock<Arc<[u8]>>>,
    path: PathBuf,
}

impl Token {
    /// The token in `path` (see [`load`]).
    ///
    /// # Errors
    /// Exit 66 if the file cannot be read, 64 if its token is unusable.
    pub(crate) fn read(path: &Path) -> Result<Self, Exit> {
        Ok(Self {
            current: Arc::new(RwLock::new(load(path)?)),
            path: path.to_path_buf(),
        })
    }

    /// Reads the file again and uses its token from now on; a file that
    /// cannot be read or holds an unusable token leaves the old one in
    /// use, and says why on standard error.
    pub(crate) fn reload(&self) {
        match load(&self.path) {
            Ok(token) => {
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = token;
                eprintln!("semaphore serve: the auth token was read again");
            }
            Err(e) => eprintln!("semaphore serve: keeping the auth token: {}", e.message),
        }
    }
}

/// The token in `path`: its text without surrounding whitespace, 16 to
/// 4096 visible ASCII characters (what a header carries unchanged).
fn load(path: &Path) -> Result<Arc<[u8]>, Exit> {
    // At most a little more than the longest token: a file that is not one
    // (`/dev/zero`) is refused, not read whole.
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|file| {
            std::io::Read::read_to_string(&mut std::io::Read::take(file, 8192), &mut text)
        })
        .map_err(|e| {
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
    Ok(token.as_bytes().into())
}

impl Token {
    /// Whether `request` bears this token: `Authorization: Bearer TOKEN`,
    /// the scheme in any case (RFC 7235, 2.1), compared in constant time
    /// whatever the length given (the token's length is not leaked
    /// either: every byte of the token is compared, the given value padded
    /// or cut to it, and the lengths compared apart).
    fn borne_by(&self, request: &Request) -> bool {
        let Some(value) = request.headers().get(header::AUTHORIZATION) else {
            return false;
        };
        let value = value.as_bytes();
        let Some(space) = value.iter().position(|b| *b == b' ') else {
            return false;
        };
        let (scheme, rest) = value.split_at(space);
        if !scheme.eq_ignore_ascii_case(b"bearer") {
            return false;
        }
        let given = rest.trim_ascii();
        let token = self
            .current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let padded: Vec<u8> = (0..token.len())
            .map(|i| given.get(i).copied().unwrap_or(0))
            .collect();
        let same_length = (given.len() as u64).ct_eq(&(token.len() as u64));
        bool::from(padded.ct_eq(&token) & same_length)
    }
}

/// The middleware: the probes and the page's own files (which hold no
/// data: the page asks for it with the token) pass, everything else
/// needs the token.
pub(crate) async fn require(State(token): State<Token>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    if path == "/healthz"
        || path == "/readyz"
        || crate::page::is_asset(path)
        || token.borne_by(&request)
    {
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
