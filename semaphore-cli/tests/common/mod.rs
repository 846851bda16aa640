//! A real `semaphore serve` process on 127.0.0.1, and a client for it.

#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

pub mod process;

pub const BIN: &str = env!("CARGO_BIN_EXE_semaphore");

/// A server process, killed when dropped.
pub struct Server {
    pub child: Child,
    pub base: String,
    pub http: reqwest::Client,
}

impl Server {
    /// Starts `semaphore serve --listen 127.0.0.1:0` with `store_args`.
    pub fn start(store_args: &[&str]) -> Server {
        Self::spawn(store_args, Stdio::inherit())
    }

    /// [`Server::start`] with the server's stderr piped to `child.stderr`.
    pub fn start_with_stderr(store_args: &[&str]) -> Server {
        Self::spawn(store_args, Stdio::piped())
    }

    /// Starts `semaphore serve --listen 0.0.0.0:0` with `args` (every
    /// address); the client calls it on 127.0.0.1.
    pub fn start_everywhere(args: &[&str]) -> Server {
        Self::spawn_on("0.0.0.0:0", args, Stdio::inherit())
    }

    fn spawn(store_args: &[&str], stderr: Stdio) -> Server {
        Self::spawn_on("127.0.0.1:0", store_args, stderr)
    }

    fn spawn_on(listen: &str, store_args: &[&str], stderr: Stdio) -> Server {
        let mut child = Command::new(BIN)
            .args(["serve", "--listen", listen])
            .args(store_args)
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("starting semaphore serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let address = line
            .strip_prefix("listening on ")
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
            .replace("0.0.0.0", "127.0.0.1");
        Server {
            child,
            base: address,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Sends `method path` with a JSON body (if any); status and body.
    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = self.http.request(method, self.url(path));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("a response");
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        let body = serde_json::from_str(&text).unwrap_or_else(|_| json!({ "raw": text }));
        (status, body)
    }

    /// The body of `GET path`, as text.
    pub async fn text(&self, path: &str) -> String {
        let response = self
            .http
            .get(self.url(path))
            .send()
            .await
            .expect("a response");
        response.text().await.unwrap()
    }

    /// The number of borrowers known to wait for pool `id`: this
    /// server's, and every ticket.
    pub async fn waiting(&self, id: &str) -> u64 {
        let (_, body) = self.call("GET", &format!("/l/{id}/leases"), None).await;
        body["waiting"].as_u64().unwrap_or(0)
    }

    pub async fn until_waiting(&self, id: &str, n: u64) {
        while self.waiting(id).await != n {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh random pool id.
/// A pool state's seed fields (`id`, `count`, `in_use`, `available`),
/// without the additive extensions (`waiting`, `longest_wait`), which it
/// checks are there.
pub fn seed_state(body: &Value) -> Value {
    assert!(
        body["waiting"].is_u64() && body["longest_wait"].is_f64(),
        "the waiting extensions are missing: {body}"
    );
    let fields = ["id", "count", "in_use", "available"];
    Value::Object(
        fields
            .iter()
            .map(|f| (f.to_string(), body[*f].clone()))
            .collect(),
    )
}

pub fn pool_id() -> String {
    uuid::Uuid::new_v4().to_string()
}
