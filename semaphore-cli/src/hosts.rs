//! The hosts the server answers to (DNS
//! rebinding). A web page on `attacker.example` that rebinds its name to
//! 127.0.0.1 makes the browser send this server requests with `Host:
//! attacker.example`, and read the answers as the page's own: with auth
//! off (the default), pools and leases. So the server answers only the
//! hosts it is known as: the loopback names (`localhost`, `127.0.0.1`,
//! `[::1]`), the `--listen` address (any IP address when it listens on
//! every address, `0.0.0.0` or `[::]`), and each `--allowed-host`; any
//! other is answered 421 `misdirected_host`.
//!
//! An IP address as the host cannot be a rebinding (the page's origin is
//! then that address), so allowing one never lets a page read what it
//! could not. The port is never compared: port forwarding (`docker -p
//! 9000:8080`, `ssh -L`) changes it, and a rebinding attack does not need
//! it. An HTTP/1.1 request without a `Host` header is answered 400
//! `missing_host`, as RFC 9112 (3.2) requires of every server; one of
//! HTTP/1.0, which has no such header, is answered. `/healthz` and
//! `/readyz` answer every host: they say nothing
//! of pools or leases, and a load balancer's probe that sends a name
//! nobody listed must not take the server out of rotation.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// One entry of `--allowed-host`, as parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Allowed {
    /// `*`: every host (the check is off).
    Any,
    /// An IP address.
    Ip(IpAddr),
    /// A name, in lower case, without a trailing dot.
    Name(String),
    /// `.example.com`: `example.com` and every name under it (kept
    /// without the leading dot).
    Domain(String),
}

/// `--allowed-host`'s value parser: `*`, an IP address (IPv6 with or
/// without brackets), a name, or `.domain`; without a port.
pub(crate) fn parse_allowed(text: &str) -> Result<Allowed, String> {
    let text = text.trim();
    if text == "*" {
        return Ok(Allowed::Any);
    }
    let bare = text
        .strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
        .unwrap_or(text);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(Allowed::Ip(ip));
    }
    let name = text.trim_end_matches('.').to_ascii_lowercase();
    let (domain, label) = match name.strip_prefix('.') {
        Some(domain) => (true, domain),
        None => (false, name.as_str()),
    };
    let valid = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_';
    if label.is_empty() || !label.chars().all(valid) || label.starts_with('.') {
        return Err(format!(
            "{text:?} is not a host: give a name (semaphore.example.com), .domain (every \
             name under it), an IP address or *, without a port"
        ));
    }
    Ok(if domain {
        Allowed::Domain(label.to_string())
    } else {
        Allowed::Name(label.to_string())
    })
}

/// The hosts a server answers to.
#[derive(Debug, Clone)]
pub(crate) struct AllowedHosts {
    /// The loopback names, the listen address and `--allowed-host`.
    allowed: Vec<Allowed>,
    /// Listening on every address: every IP address is one of its own.
    any_ip: bool,
}

impl AllowedHosts {
    /// The hosts of a server listening on `listen`, and `extra`.
    pub(crate) fn new(listen: SocketAddr, extra: &[Allowed]) -> Self {
        let mut allowed = vec![
            Allowed::Name("localhost".into()),
            Allowed::Ip(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            Allowed::Ip(IpAddr::V6(Ipv6Addr::LOCALHOST)),
            Allowed::Ip(listen.ip()),
        ];
        allowed.extend(extra.iter().cloned());
        Self {
            allowed,
            any_ip: listen.ip().is_unspecified(),
        }
    }

    /// Whether `authority` (a `Host` header's value: a host and maybe a
    /// port) names this server.
    pub(crate) fn allows(&self, authority: &str) -> bool {
        let host = without_port(authority);
        let bare = host
            .strip_prefix('[')
            .and_then(|rest| rest.strip_suffix(']'))
            .unwrap_or(host);
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return self.any_ip
                || self
                    .allowed
                    .iter()
                    .any(|a| matches!(a, Allowed::Any) || *a == Allowed::Ip(ip));
        }
        let name = host.trim_end_matches('.').to_ascii_lowercase();
        self.allowed.iter().any(|allowed| match allowed {
            Allowed::Any => true,
            Allowed::Ip(_) => false,
            Allowed::Name(allowed) => *allowed == name,
            Allowed::Domain(domain) => {
                name == *domain
                    || name
                        .strip_suffix(domain.as_str())
                        .is_some_and(|head| head.ends_with('.'))
            }
        })
    }
}

/// `authority` without its port: `[::1]:8080` is `[::1]`, `a:80` is `a`.
fn without_port(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority
            .find(']')
            .map_or(authority, |end| &authority[..=end]);
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => {
            host
        }
        _ => authority,
    }
}

/// The middleware: 421 `misdirected_host` for a request whose host this
/// server is not known as; the probes pass whatever their host.
pub(crate) async fn answer_known(
    State(hosts): State<Arc<AllowedHosts>>,
    request: Request,
    next: Next,
) -> Response {
    if request.version() == axum::http::Version::HTTP_11
        && !request.headers().contains_key(header::HOST)
    {
        return ApiError::new(
            StatusCode::BAD_REQUEST,
            "missing_host",
            "an HTTP/1.1 request must have a Host header (RFC 9112, 3.2)",
        )
        .with_field("Host")
        .into_response();
    }
    let path = request.uri().path();
    if path == "/healthz" || path == "/readyz" {
        return next.run(request).await;
    }
    // An absolute-form request's own authority wins over its Host (RFC
    // 9112, 3.2.2).
    let asked = match request.uri().authority() {
        Some(authority) => Some(authority.host().to_string()),
        None => request
            .headers()
            .get(header::HOST)
            .map(|host| host.to_str().unwrap_or("\u{fffd}").to_string()),
    };
    match asked {
        Some(host) if !hosts.allows(&host) => misdirected(&host).into_response(),
        _ => next.run(request).await,
    }
}

/// 421 for a request to `host`, shown cut to 64 characters.
fn misdirected(host: &str) -> ApiError {
    let shown: String = host.chars().take(64).collect();
    ApiError::new(
        StatusCode::MISDIRECTED_REQUEST,
        "misdirected_host",
        format!(
            "this server does not answer to host {shown:?}: ask it as localhost, 127.0.0.1, \
             [::1] or its --listen address, or start it with --allowed-host naming the host \
             (a guard against DNS rebinding)"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(listen: &str, extra: &[&str]) -> AllowedHosts {
        let extra: Vec<Allowed> = extra.iter().map(|e| parse_allowed(e).unwrap()).collect();
        AllowedHosts::new(listen.parse().unwrap(), &extra)
    }

    #[test]
    fn loopback_names_and_the_listen_address_with_any_port() {
        let h = hosts("10.0.0.5:8080", &[]);
        for host in [
            "localhost",
            "LocalHost:8080",
            "localhost.",
            "127.0.0.1",
            "127.0.0.1:9",
            "[::1]",
            "[::1]:8080",
            "10.0.0.5:8080",
        ] {
            assert!(h.allows(host), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:8080",
            "localhost.evil.example",
            "10.0.0.6",
            "[::2]:8080",
            "",
            "127.1",
        ] {
            assert!(!h.allows(host), "{host}");
        }
    }

    #[test]
    fn every_address_when_listening_on_all_and_listed_names() {
        let h = hosts(
            "0.0.0.0:8080",
            &["semaphore.internal", ".corp.example", "192.0.2.7"],
        );
        for host in [
            "10.1.2.3:8080",
            "[2001:db8::1]",
            "semaphore.internal:443",
            "corp.example",
            "a.b.corp.example",
        ] {
            assert!(h.allows(host), "{host}");
        }
        for host in ["evilcorp.example", "semaphore.internal.evil", "x"] {
            assert!(!h.allows(host), "{host}");
        }
        assert!(hosts("127.0.0.1:1", &["*"]).allows("anything.example"));
        assert!(hosts("127.0.0.1:1", &["[2001:db8::1]"]).allows("[2001:db8::1]:80"));
    }

    #[test]
    fn allowed_hosts_take_no_port_and_no_junk() {
        for bad in ["", ".", "a:80", "a/b", "a b", "..a"] {
            assert!(parse_allowed(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            parse_allowed("Semaphore.Example.").unwrap(),
            Allowed::Name("semaphore.example".into())
        );
    }
}
