//! Lines 11 and 12 of BENCHMARKS.md: the HTTP service.
//!
//! - Line 11: borrow + return pairs over HTTP/1.1 keep-alive, driven by
//!   `wrk` (8 connections, `benches/http/pairs.lua`), against a raw axum
//!   handler that does nothing, driven the same way in the same run: our
//!   requests per second as a fraction of that ceiling, on the memory and
//!   SQLite stores.
//! - Line 12: a waiting borrow woken by a return from another client: the
//!   latency from sending the return to the waiter's answer (the return's
//!   own round trip included), over 200 hand-offs.
//!
//! Needs `wrk` on PATH (Debian: `apt-get install wrk`) and the release
//! binary (`cargo build --release -p semaphore-cli`); without either it
//! says so and records nothing. Writes `target/semaphore-bench/line11.json`
//! and `line12.json` for the `report` binary.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use semaphore_benches::{out_dir, percentile};
use serde_json::{Value, json};

const SECONDS: &str = "4";

fn target_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .map_or_else(|| PathBuf::from("target"), Path::to_path_buf)
}

/// `semaphore serve` on a free port, with `store` arguments; killed on drop.
struct Server(Child, String);

impl Server {
    fn start(binary: &Path, store: &[&str]) -> Server {
        let mut child = Command::new(binary)
            .args(["serve", "--listen", "127.0.0.1:0", "--max-wait", "5s"])
            .args(store)
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting semaphore serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let base = line
            .split_whitespace()
            .nth(2)
            .expect("the address")
            .to_string();
        Server(child, base)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs wrk against `url` (with the pairs script if `pool` is given);
/// requests per second.
fn wrk(url: &str, pool: Option<&str>) -> f64 {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/http/pairs.lua");
    let mut command = Command::new("wrk");
    command.args(["-t", "2", "-c", "8", "-d", SECONDS, "--latency"]);
    if let Some(pool) = pool {
        command.env("SEMAPHORE_POOL", pool).args(["-s", script]);
    }
    let out = command.arg(url).output().expect("running wrk");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no Requests/sec in wrk's output:\n{text}"))
}

async fn register(http: &reqwest::Client, base: &str, id: &str, count: u32) {
    http.put(format!("{base}/l/{id}"))
        .json(&json!({"count": count}))
        .send()
        .await
        .unwrap();
}

async fn line11(binary: &Path, ceiling: f64, store: &[&str]) -> Value {
    let server = Server::start(binary, store);
    let http = reqwest::Client::new();
    let id = uuid::Uuid::new_v4().to_string();
    register(&http, &server.1, &id, 1000).await;
    let ours = tokio::task::block_in_place(|| wrk(&server.1, Some(&id)));
    json!({ "requests_per_s": ours, "ceiling_requests_per_s": ceiling, "ratio": ours / ceiling })
}

async fn line12(binary: &Path) -> Value {
    let server = Server::start(binary, &["--memory"]);
    let http = reqwest::Client::new();
    let id = uuid::Uuid::new_v4().to_string();
    register(&http, &server.1, &id, 1).await;
    let borrow = |wait: u64| {
        let (http, url) = (http.clone(), format!("{}/l/{id}/borrow", server.1));
        async move {
            let body: Value = http
                .post(url)
                .json(&json!({"ttl": 60, "wait": wait}))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            (Instant::now(), body["lease"].as_str().unwrap().to_string())
        }
    };
    let (_, mut held) = borrow(0).await;
    let mut latencies = Vec::new();
    for _ in 0..200 {
        let waiter = tokio::spawn(borrow(10));
        loop {
            let leases: Value = http
                .get(format!("{}/l/{id}/leases", server.1))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if leases["waiting"] == 1 {
                break;
            }
        }
        // From sending the return: the waiter may be answered before the
        // returning client is.
        let returned = Instant::now();
        http.post(format!("{}/l/{id}/return", server.1))
            .json(&json!({"lease": held}))
            .send()
            .await
            .unwrap();
        let (granted, lease) = waiter.await.unwrap();
        latencies.push(granted.saturating_duration_since(returned).as_micros() as u64);
        held = lease;
    }
    latencies.sort_unstable();
    json!({
        "hand_offs": latencies.len(),
        "p50_us": percentile(&latencies, 0.5),
        "p99_us": percentile(&latencies, 0.99),
    })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if !semaphore_benches::selected("http", &args) {
        return;
    }
    let binary = target_dir().join("release/semaphore");
    if !binary.is_file() || Command::new("wrk").arg("--version").output().is_err() {
        println!(
            "http bench skipped: needs {} (cargo build --release -p semaphore-cli) and wrk on PATH (apt-get install wrk)",
            binary.display()
        );
        return;
    }
    // The ceiling: an axum handler that does nothing, over the same wrk.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let noop = format!("http://{}", listener.local_addr().unwrap());
    let router = axum::Router::new().route("/", axum::routing::get(|| async { "" }));
    tokio::spawn(async move { axum::serve(listener, router).await });
    let ceiling = tokio::task::block_in_place(|| wrk(&noop, None));

    let memory = line11(&binary, ceiling, &["--memory"]).await;
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let db = dir.path().join("http.db");
    let sqlite = line11(&binary, ceiling, &["--sqlite", db.to_str().unwrap()]).await;
    let eleven = json!({ "memory": memory, "sqlite": sqlite });
    let twelve = line12(&binary).await;
    println!("line 11: {eleven}");
    println!("line 12: {twelve}");
    let out = out_dir(env!("CARGO_TARGET_TMPDIR"));
    std::fs::write(out.join("line11.json"), eleven.to_string()).unwrap();
    std::fs::write(out.join("line12.json"), twelve.to_string()).unwrap();
}
