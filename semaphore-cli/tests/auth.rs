//! `semaphore serve --auth-token-file`: every request but the probes needs
//! the bearer token, compared whole; a missing or wrong one is a 401 with
//! the seed's JSON error; the token never shows in the server's output.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_semaphore");
const TOKEN: &str = "3f9c2a7d1e8b4c60a5d7e2f1b3c4d5e6";

/// `semaphore serve --memory` on a free port, with the token in `file`.
fn serve(file: &std::path::Path) -> Command {
    let mut command = Command::new(BIN);
    command
        .args([
            "serve",
            "--memory",
            "--listen",
            "127.0.0.1:0",
            "--auth-token-file",
        ])
        .arg(file);
    command
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_bearer_of_the_token_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, format!("{TOKEN}\n")).unwrap();
    let mut child = serve(&file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let base = line
        .strip_prefix("listening on ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .to_string();
    let http = reqwest::Client::new();
    let pool = format!("{base}/l/{}", uuid::Uuid::new_v4());
    let put = |token: Option<&str>| {
        let mut request = http.put(&pool).json(&serde_json::json!({"count": 1}));
        if let Some(token) = token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        request.send()
    };

    let near_miss = &TOKEN[..TOKEN.len() - 1];
    let longer = format!("{TOKEN}0");
    for token in [None, Some("wrong"), Some(near_miss), Some(longer.as_str())] {
        let answer = put(token).await.unwrap();
        assert_eq!(answer.status(), 401, "{token:?}");
        assert_eq!(answer.headers()["www-authenticate"], "Bearer");
        let body: serde_json::Value = answer.json().await.unwrap();
        assert_eq!(body["code"], "unauthorized", "{body}");
        assert!(body["error"].is_string());
    }
    // Unknown routes and the service's own documents are closed too.
    for path in ["/metrics", "/openapi.json", "/nowhere"] {
        let answer = http.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(answer.status(), 401, "{path}");
    }
    // The probes stay open, for the orchestrator.
    for path in ["/healthz", "/readyz"] {
        let answer = http.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(answer.status(), 200, "{path}");
    }
    assert_eq!(put(Some(TOKEN)).await.unwrap().status(), 200);
    // The scheme is case-insensitive (RFC 7235); the token is not.
    for header in [
        format!("bearer {TOKEN}"),
        format!("BEARER {TOKEN}"),
        format!("Bearer  {TOKEN}"),
    ] {
        let answer = http
            .put(&pool)
            .json(&serde_json::json!({"count": 1}))
            .header("Authorization", &header)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200, "{header}");
    }
    let answer = http
        .put(&pool)
        .json(&serde_json::json!({"count": 1}))
        .header("Authorization", format!("Bearer {}", TOKEN.to_uppercase()))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 401);

    child.kill().unwrap();
    child.wait().unwrap();
    let mut said = line;
    out.read_to_string(&mut said).unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut said)
        .unwrap();
    assert!(!said.contains(TOKEN), "the token was printed: {said}");
}

/// A token too short to be a secret is refused at start, naming the file.
#[test]
fn a_short_token_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, "abc\n").unwrap();
    let output = serve(&file).output().unwrap();
    assert_eq!(output.status.code(), Some(64));
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("--auth-token-file"), "{said}");
}

/// SIGHUP reads the token file again, so a rotated token
/// takes effect without a restart; a file rewritten with an unusable token
/// keeps the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reads_the_token_file_again() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, TOKEN).unwrap();
    let mut child = serve(&file)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let base = line
        .strip_prefix("listening on ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .to_string();
    let http = reqwest::Client::new();
    let pool = format!("{base}/l/{}", uuid::Uuid::new_v4());
    let status = |token: &'static str| {
        let request = http
            .put(&pool)
            .json(&serde_json::json!({"count": 1}))
            .header("Authorization", format!("Bearer {token}"));
        async move { request.send().await.unwrap().status().as_u16() }
    };
    const NEXT: &str = "9a8b7c6d5e4f30211f2e3d4c5b6a7988";
    assert_eq!(status(TOKEN).await, 200);
    assert_eq!(status(NEXT).await, 401);

    let hangup = |pid: u32| {
        std::process::Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .unwrap()
    };
    std::fs::write(&file, "short").unwrap();
    hangup(child.id());
    std::fs::write(&file, NEXT).unwrap();
    hangup(child.id());
    let patience = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while status(NEXT).await != 200 {
        assert!(
            std::time::Instant::now() < patience,
            "the new token was never read"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(status(TOKEN).await, 401, "the old token still works");
    child.kill().unwrap();
    child.wait().unwrap();
}
