//! The page at `/` of `semaphore serve`, in a real browser: Debian's
//! chromium, headless, driven through chromedriver (WebDriver, with
//! fantoccini). It draws one pool's slots with their owners, tokens and
//! ttls and its waiters in line, changes within 2 s of a return made by
//! another client, shows an owner label that is markup as text (no
//! element made, no script run), lists the pools, and offers a forced
//! return only on a server with a bearer token, to the page that gives it.
//! A screenshot of a pool with holders and waiters is written to
//! `target/semaphore-page.png`.

mod common;

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::Server;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

/// What an owner label that is markup must show as.
const MARKUP: &str = "<img src=x onerror=alert(1)>";

/// chromedriver on a free port, killed when dropped, and a headless
/// chromium session on it.
struct Browser {
    driver: Child,
    client: Client,
}

impl Browser {
    async fn start() -> Browser {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // In a process group of its own, with the browser it starts, so
        // that a failing test ends both (see `Drop`).
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect(
                "chromedriver: install Debian's chromium and chromium-driver (scripts/test does)",
            );
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1100,760"],
            }),
        );
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let started = Instant::now();
        let client = loop {
            match ClientBuilder::new(connector.clone())
                .capabilities(capabilities.clone())
                .connect(&format!("http://127.0.0.1:{port}"))
                .await
            {
                Ok(client) => break client,
                Err(e) if started.elapsed() < Duration::from_secs(20) => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("no WebDriver session on chromedriver: {e}"),
            }
        };
        Browser { driver, client }
    }

    /// The text of every element `css` finds, read at one instant (the
    /// page draws its elements anew each second: one found by one call
    /// may be gone at the next).
    async fn texts(&self, css: &str) -> Vec<String> {
        let read = "return Array.from(document.querySelectorAll(arguments[0]), e => e.innerText)";
        let texts = self.client.execute(read, vec![json!(css)]).await.unwrap();
        serde_json::from_value(texts).unwrap()
    }

    /// Clicks the element `css` finds.
    async fn click(&self, css: &str) {
        let element = self.client.find(Locator::Css(css)).await.unwrap();
        element.click().await.unwrap();
    }

    /// Waits up to `within` for `done` on the texts `css` finds; they.
    async fn until(
        &self,
        css: &str,
        within: Duration,
        done: impl Fn(&[String]) -> bool,
    ) -> Vec<String> {
        let started = Instant::now();
        loop {
            let texts = self.texts(css).await;
            if done(&texts) {
                return texts;
            }
            assert!(
                started.elapsed() < within,
                "{css} did not change within {within:?}: {texts:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let group = format!("-{}", self.driver.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.driver.wait();
    }
}

/// Borrows a slot of `pool` for 60 s as `owner`; the answer.
async fn borrow(server: &Server, pool: &str, owner: &str) -> Value {
    let (status, lease) = server
        .call(
            "POST",
            &format!("/l/{pool}/borrow"),
            Some(json!({"ttl": 60, "owner": owner})),
        )
        .await;
    assert_eq!(status, 200, "{lease}");
    lease
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_draws_slots_and_waiters_live_and_labels_as_text() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("page.db");
    let server = Server::start(&["--sqlite", db.to_str().unwrap()]);
    let pool = common::pool_id();
    server
        .call("PUT", &format!("/l/{pool}"), Some(json!({"count": 2})))
        .await;
    borrow(&server, &pool, MARKUP).await;
    let second = borrow(&server, &pool, "trainer-b").await;
    let waiter = {
        let (http, url) = (
            server.http.clone(),
            server.url(&format!("/l/{pool}/borrow")),
        );
        tokio::spawn(async move {
            let answer = http
                .post(url)
                .json(&json!({"ttl": 60, "wait": 30, "owner": "next-in-line"}))
                .send();
            answer.await.unwrap().json::<Value>().await.unwrap()
        })
    };
    server.until_waiting(&pool, 1).await;
    let (status, ticket) = server
        .call(
            "POST",
            &format!("/l/{pool}/enqueue"),
            Some(json!({"ttl": 60})),
        )
        .await;
    assert_eq!(status, 202, "{ticket}");

    let browser = Browser::start().await;
    browser
        .client
        .goto(&server.url(&format!("/#pool={pool}")))
        .await
        .unwrap();
    let cells = browser
        .until("#slots .slot", Duration::from_secs(5), |t| {
            t.len() == 2 && t[0].contains(MARKUP)
        })
        .await;
    assert!(
        cells[0].starts_with('0') && cells[0].contains("token 1") && cells[0].contains("left"),
        "{cells:?}"
    );
    assert!(
        cells[1].contains("trainer-b") && cells[1].contains("token 2"),
        "{cells:?}"
    );
    assert!(
        browser
            .client
            .find_all(Locator::Css("#slots img"))
            .await
            .unwrap()
            .is_empty(),
        "the label made no element"
    );
    assert!(
        browser.client.get_alert_text().await.is_err(),
        "the label ran no script"
    );
    assert!(
        browser
            .client
            .find_all(Locator::Css(".force"))
            .await
            .unwrap()
            .is_empty(),
        "no act without a token"
    );
    let waiters = browser
        .until("#waiters li", Duration::from_secs(2), |t| t.len() == 2)
        .await;
    assert!(
        waiters[0].starts_with("a borrow here") && waiters[1].starts_with("a ticket"),
        "{waiters:?}"
    );
    let shot = browser.client.screenshot().await.unwrap();
    let target = concat!(env!("CARGO_MANIFEST_DIR"), "/../target/semaphore-page.png");
    std::fs::write(target, shot).unwrap();

    // Another client returns trainer-b's lease: the waiter takes slot 1.
    let (_, returned) = server
        .call(
            "POST",
            &format!("/l/{pool}/return"),
            Some(json!({"lease": second["lease"]})),
        )
        .await;
    assert_eq!(returned["returned"], json!(true));
    browser
        .until("#slots .slot", Duration::from_secs(2), |t| {
            t.len() == 2 && t[1].contains("next-in-line")
        })
        .await;
    browser
        .until("#waiters li", Duration::from_secs(2), |t| t.len() == 1)
        .await;
    // And it returns that lease: slot 1 is free.
    let granted = waiter.await.unwrap();
    server
        .call(
            "POST",
            &format!("/l/{pool}/return"),
            Some(json!({"lease": granted["lease"]})),
        )
        .await;
    browser
        .until("#slots .slot", Duration::from_secs(2), |t| {
            t.len() == 2 && t[1].contains("free")
        })
        .await;

    // The pools, with this one among them.
    browser.client.goto(&server.url("/#")).await.unwrap();
    let rows = browser
        .until("#pools tbody tr", Duration::from_secs(5), |t| !t.is_empty())
        .await;
    assert!(rows.iter().any(|r| r.starts_with(&pool)), "{rows:?}");
    browser.client.clone().close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_return_is_offered_only_with_the_token_and_ends_the_lease() {
    const TOKEN: &str = "page-token-0123456789";
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, TOKEN).unwrap();
    let server = Server::start(&["--memory", "--auth-token-file", file.to_str().unwrap()]);
    let pool = common::pool_id();
    let bearer = |request: reqwest::RequestBuilder| request.bearer_auth(TOKEN);
    let put = bearer(server.http.put(server.url(&format!("/l/{pool}")))).json(&json!({"count": 1}));
    assert_eq!(put.send().await.unwrap().status(), 200);
    let held = bearer(server.http.post(server.url(&format!("/l/{pool}/borrow"))))
        .json(&json!({"ttl": 60, "owner": "stuck-job"}));
    assert_eq!(held.send().await.unwrap().status(), 200);

    let browser = Browser::start().await;
    browser
        .client
        .goto(&server.url(&format!("/#pool={pool}")))
        .await
        .unwrap();
    // The page asks for the token, and draws the pool once given it.
    browser
        .until("#login", Duration::from_secs(5), |t| {
            t.iter().any(|t| t.contains("bearer token"))
        })
        .await;
    browser
        .client
        .find(Locator::Css("#token"))
        .await
        .unwrap()
        .send_keys(TOKEN)
        .await
        .unwrap();
    browser.click("#login button").await;
    browser
        .until("#slots .slot", Duration::from_secs(5), |t| {
            t.len() == 1 && t[0].contains("stuck-job")
        })
        .await;
    // The token is kept in the tab: a reload still offers the act.
    browser.client.refresh().await.unwrap();
    browser
        .until("#slots .slot", Duration::from_secs(5), |t| {
            t.len() == 1 && t[0].contains("force return")
        })
        .await;
    browser.click(".force").await;
    assert!(
        browser
            .client
            .get_alert_text()
            .await
            .unwrap()
            .contains("stuck-job"),
        "it asks first"
    );
    browser.client.accept_alert().await.unwrap();
    browser
        .until("#slots .slot", Duration::from_secs(2), |t| {
            t.len() == 1 && t[0].contains("free")
        })
        .await;
    let state = bearer(server.http.get(server.url(&format!("/l/{pool}"))))
        .send()
        .await
        .unwrap();
    assert_eq!(state.json::<Value>().await.unwrap()["in_use"], json!(0));
    browser.client.clone().close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_return_needs_a_server_with_a_token() {
    let server = Server::start(&["--memory"]);
    let pool = common::pool_id();
    server
        .call("PUT", &format!("/l/{pool}"), Some(json!({"count": 1})))
        .await;
    borrow(&server, &pool, "job").await;
    let (status, body) = server
        .call(
            "POST",
            &format!("/l/{pool}/force-return"),
            Some(json!({"position": 0})),
        )
        .await;
    assert_eq!(
        (status, &body["code"]),
        (403, &json!("needs_auth")),
        "{body}"
    );
    let (_, state) = server.call("GET", &format!("/l/{pool}"), None).await;
    assert_eq!(state["in_use"], json!(1), "nothing was returned");
    let page = server.http.get(server.url("/")).send().await.unwrap();
    let policy = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(policy.contains("script-src 'self'"), "{policy}");
    assert!(page.text().await.unwrap().contains("/page.js"));
}
