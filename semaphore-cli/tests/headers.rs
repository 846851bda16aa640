//! What the server makes of a request's headers:
//! a host it is not known as is refused (DNS rebinding), and so is
//! a header it acts on sent twice. Raw requests over real
//! sockets to real server processes.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{Server, pool_id};
use serde_json::{Value, json};

const TOKEN: &str = "3f9c2a7d1e8b4c60a5d7e2f1b3c4d5e6";

/// Sends `head` (the request line and headers, without the blank line;
/// empty lines are dropped) and `body` over a new connection that the server is asked to close;
/// the status and JSON body of the answer.
fn raw(server: &Server, head: &str, body: &str) -> (u16, Value) {
    let address = server.base.trim_start_matches("http://");
    // Lines left empty (no auth header) are no lines.
    let head = head
        .split("\r\n")
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join("\r\n");
    let mut socket = TcpStream::connect(address).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let request = format!(
        "{head}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    socket.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    socket.read_to_end(&mut answer).unwrap();
    let text = String::from_utf8_lossy(&answer);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP answer: {text:?}"));
    let body = text.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

/// A second `Content-Type`, `Authorization` or `Idempotency-Key` is a 400
/// `duplicate_header` naming the header, not ignored (the first one won):
/// the borrow takes nothing, and with auth on a good token first and a
/// bad one second is refused too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_sent_twice_is_a_400_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, TOKEN).unwrap();
    let open = Server::start(&["--memory"]);
    let guarded = Server::start(&["--memory", "--auth-token-file", file.to_str().unwrap()]);
    let bearer = format!("Authorization: Bearer {TOKEN}");
    for (server, auth) in [(&open, ""), (&guarded, bearer.as_str())] {
        let id = pool_id();
        let pool = format!("/l/{id}");
        let start = format!("POST {pool}/borrow HTTP/1.1\r\nHost: localhost");
        let json = "Content-Type: application/json";
        let (status, body) = raw(
            server,
            &format!("PUT {pool} HTTP/1.1\r\nHost: localhost\r\n{json}\r\n{auth}"),
            r#"{"count": 1}"#,
        );
        assert_eq!(status, 200, "{body}");
        let twice = [
            (
                "Content-Type",
                format!("{start}\r\n{json}\r\nContent-Type: text/plain\r\n{auth}"),
            ),
            (
                "Content-Type",
                format!("{start}\r\n{json}\r\n{json}\r\n{auth}"),
            ),
            (
                "Authorization",
                format!("{start}\r\n{json}\r\n{bearer}\r\nAuthorization: Bearer wrong"),
            ),
            (
                "Idempotency-Key",
                format!("{start}\r\n{json}\r\n{auth}\r\nIdempotency-Key: a\r\nIdempotency-Key: b"),
            ),
        ];
        for (name, head) in twice {
            let (status, body) = raw(server, &head, r#"{"ttl": 60}"#);
            assert_eq!(
                (status, body["code"].as_str()),
                (400, Some("duplicate_header")),
                "{name}: {body}"
            );
            let said = body["error"].as_str().unwrap_or_default();
            assert!(said.contains(name), "{name}: {body}");
            assert_eq!(body["field"], json!(name), "{body}");
        }
        let (status, state) = raw(
            server,
            &format!("GET {pool} HTTP/1.1\r\nHost: localhost\r\n{auth}"),
            "",
        );
        assert_eq!((status, &state["in_use"]), (200, &json!(0)), "{state}");
    }
}

/// `GET path` with `Host: host` (none if empty): the status and body.
fn get(server: &Server, path: &str, host: &str) -> (u16, Value) {
    let host = if host.is_empty() {
        String::new()
    } else {
        format!("Host: {host}")
    };
    raw(server, &format!("GET {path} HTTP/1.1\r\n{host}"), "")
}

/// With auth off (the default), a request whose `Host` is a name this
/// server is not known as, as a page that rebound its name to 127.0.0.1
/// sends, is answered 421 `misdirected_host` and does nothing; the
/// loopback names and addresses are answered with any port, in any case;
/// the probes answer every host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebound_name_is_421_and_the_loopback_names_are_answered() {
    let server = Server::start(&["--memory"]);
    let port = server.base.rsplit(':').next().unwrap().to_string();
    let pool = format!("/l/{}", pool_id());
    let json = "Content-Type: application/json";
    for host in ["rebound.example", &format!("rebound.example:{port}")] {
        let (status, body) = get(&server, "/metrics", host);
        assert_eq!(
            (status, body["code"].as_str()),
            (421, Some("misdirected_host")),
            "{host}: {body}"
        );
        assert_eq!(body["retryable"], false, "{body}");
        let head = format!("PUT {pool} HTTP/1.1\r\nHost: {host}\r\n{json}");
        let (status, body) = raw(&server, &head, r#"{"count": 1}"#);
        assert_eq!(status, 421, "{host}: {body}");
    }
    let (status, body) = get(&server, &pool, "localhost");
    assert_eq!(status, 404, "the refused PUT made no pool: {body}");
    for host in [
        "localhost".to_string(),
        format!("LocalHost:{port}"),
        "127.0.0.1".to_string(),
        format!("127.0.0.1:{port}"),
        "[::1]:1".to_string(),
    ] {
        let (status, body) = get(&server, "/metrics", &host);
        assert_eq!(status, 200, "{host:?}: {body}");
    }
    // RFC 9112 (3.2): an HTTP/1.1 request without Host is a 400, on every
    // route; HTTP/1.0 has no Host to send, and is answered.
    for path in ["/metrics", "/healthz"] {
        let (status, body) = get(&server, path, "");
        assert_eq!(
            (status, body["code"].as_str()),
            (400, Some("missing_host")),
            "{path}: {body}"
        );
    }
    let (status, body) = raw(&server, "GET /metrics HTTP/1.0", "");
    assert_eq!(status, 200, "HTTP/1.0 without Host: {body}");
    for probe in ["/healthz", "/readyz"] {
        let (status, body) = get(&server, probe, "rebound.example");
        assert_eq!(status, 200, "{probe}: {body}");
    }
}

/// `--allowed-host` (repeatable and comma-separated) adds names, and
/// `.domain` every name under one; a server listening on every address
/// (0.0.0.0) answers every IP address, but still no name it was not given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_hosts_and_every_address_of_a_server_listening_on_all() {
    let server = Server::start_everywhere(&[
        "--memory",
        "--allowed-host",
        "semaphore.internal,.corp.example",
        "--allowed-host",
        "other.example",
    ]);
    for host in [
        "semaphore.internal:8443",
        "corp.example",
        "gpu.lab.corp.example",
        "other.example",
        "192.0.2.7:80",
        "[2001:db8::7]",
    ] {
        let (status, body) = get(&server, "/metrics", host);
        assert_eq!(status, 200, "{host}: {body}");
    }
    for host in ["evilcorp.example", "semaphore.internal.evil.example"] {
        let (status, body) = get(&server, "/metrics", host);
        assert_eq!(status, 421, "{host}: {body}");
    }
}
