//! Two-phase tickets across servers: two `semaphore serve`
//! processes on one shared store (a SQLite file, a PostgreSQL schema, a
//! MySQL prefix, a Redis prefix), on 127.0.0.1. A ticket taken on one is
//! polled, granted and cancelled on the other, keeps its place ahead of a
//! later client of either, and is gone once cancelled or served.

mod common;

use common::{Server, pool_id};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_from_one_server_is_waited_on_another_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shared.db");
    across(&["--sqlite", db.to_str().unwrap()]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_from_one_server_is_waited_on_another_postgres() {
    use semaphore_postgres::testing::TestServer;
    let (pg, schema) = (TestServer::shared(), TestServer::fresh_schema());
    across(&["--postgres", pg.url(), "--postgres-schema", &schema]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_from_one_server_is_waited_on_another_mysql() {
    use semaphore_mysql::testing::TestServer;
    let (mysql, prefix) = (TestServer::shared(), TestServer::fresh_prefix());
    across(&["--mysql", mysql.url(), "--mysql-prefix", &prefix]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_from_one_server_is_waited_on_another_etcd() {
    use semaphore_etcd::testing::TestCluster;
    let (urls, prefix) = (
        TestCluster::shared().endpoints().join(","),
        TestCluster::fresh_prefix(),
    );
    across(&["--etcd", &urls, "--etcd-prefix", &prefix]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_from_one_server_is_waited_on_another_redis() {
    use semaphore_redis::testing::TestServer;
    let (redis, prefix) = (TestServer::shared(), TestServer::fresh_prefix());
    let args = ["--redis", redis.url(), "--redis-prefix", &prefix];
    across(&[&args[..], &["--redis-restart-grace", "0s"]].concat()).await;
}

async fn post(server: &Server, path: &str, body: Value) -> (u16, Value) {
    server.call("POST", path, Some(body)).await
}

async fn across(store: &[&str]) {
    let args = [store, &["--ticket-hold", "5s"]].concat();
    let (a, b) = (Server::start(&args), Server::start(&args));
    let id = pool_id();
    let pool = format!("/l/{id}");
    a.call("PUT", &pool, Some(json!({"count": 1}))).await;
    let (_, held) = post(&a, &format!("{pool}/borrow"), json!({"ttl": 60})).await;

    let (status, queued) = post(
        &a,
        &format!("{pool}/enqueue"),
        json!({"ttl": 60, "owner": "gpu-job"}),
    )
    .await;
    assert_eq!(
        (status, queued["place"].as_u64()),
        (202, Some(1)),
        "{queued}"
    );
    let ticket = queued["ticket"].clone();
    let wait = format!("{pool}/wait");

    // Server B knows the ticket, and the place it keeps.
    let (status, polled) = post(&b, &wait, json!({"ticket": ticket, "wait": 0.2})).await;
    assert_eq!(
        (status, polled["place"].as_u64()),
        (202, Some(1)),
        "{polled}"
    );

    // A later client of server B waits behind the ticket; it has taken its
    // place in the store once a ticket made after it counts it.
    let later = {
        let (http, url) = (b.http.clone(), b.url(&format!("{pool}/borrow")));
        tokio::spawn(async move {
            let answer = http
                .post(url)
                .json(&json!({"ttl": 60, "wait": 30}))
                .send()
                .await
                .unwrap();
            (
                answer.status().as_u16(),
                answer.json::<Value>().await.unwrap(),
            )
        })
    };
    // The ticket, and the later client.
    b.until_waiting(&id, 2).await;
    let mut probe = post(&a, &format!("{pool}/enqueue"), json!({"ttl": 60}))
        .await
        .1;
    while probe["place"] == 2 {
        post(
            &a,
            &format!("{pool}/cancel"),
            json!({"ticket": probe["ticket"]}),
        )
        .await;
        probe = post(&a, &format!("{pool}/enqueue"), json!({"ttl": 60}))
            .await
            .1;
    }
    assert_eq!(probe["place"], 3, "{probe}");
    // Cancelled on server B, the probe made on A is gone everywhere.
    let tickets = format!("{pool}/tickets/{}", probe["ticket"].as_str().unwrap());
    let (status, body) = b.call("DELETE", &tickets, None).await;
    assert_eq!((status, body["cancelled"].as_bool()), (200, Some(true)));
    let (status, body) = a.call("DELETE", &tickets, None).await;
    assert_eq!((status, body["cancelled"].as_bool()), (200, Some(false)));
    let (status, body) = post(&a, &wait, json!({"ticket": probe["ticket"], "wait": 0})).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("ticket_not_found"))
    );

    // The holder returns on server A; the ticket's poll on B, waiting,
    // gets the slot ahead of B's own waiting client.
    let poll = {
        let (http, url, ticket) = (b.http.clone(), b.url(&wait), ticket.clone());
        tokio::spawn(async move {
            let answer = http
                .post(url)
                .json(&json!({"ticket": ticket, "wait": 20}))
                .send()
                .await
                .unwrap();
            (
                answer.status().as_u16(),
                answer.json::<Value>().await.unwrap(),
            )
        })
    };
    post(
        &a,
        &format!("{pool}/return"),
        json!({"lease": held["lease"]}),
    )
    .await;
    let (status, lease) = poll.await.unwrap();
    assert_eq!(
        (status, lease["position"].as_u64()),
        (200, Some(0)),
        "{lease}"
    );
    assert!(
        !later.is_finished(),
        "the later client came after the ticket"
    );
    let (_, holders) = a.call("GET", &format!("{pool}/leases"), None).await;
    assert!(holders.to_string().contains("gpu-job"), "{holders}");

    // Polled again on A (its answer lost): the same lease.
    let (status, again) = post(&a, &wait, json!({"ticket": ticket, "wait": 0})).await;
    assert_eq!((status, &again["lease"]), (200, &lease["lease"]));
    post(
        &b,
        &format!("{pool}/return"),
        json!({"lease": lease["lease"]}),
    )
    .await;
    let (status, body) = later.await.unwrap();
    assert_eq!(status, 200, "{body}");
    // Served and returned: the ticket is spent on every server.
    for server in [&a, &b] {
        let (status, body) = post(server, &wait, json!({"ticket": ticket, "wait": 0})).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (404, Some("ticket_not_found"))
        );
    }
    post(
        &b,
        &format!("{pool}/return"),
        json!({"lease": body["lease"]}),
    )
    .await;
}

/// 12 tickets enqueued alternately on two servers sharing a SQLite file,
/// each polled by two clients at once (one per server) until granted, held
/// a moment and returned: both polls of a ticket get the same lease, every
/// ticket is served once, and no position is ever held twice at once, across
/// servers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tickets_polled_on_both_servers_at_once_are_each_served_once_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("race.db");
    served_once(&["--sqlite", db.to_str().unwrap()]).await;
}

/// The same on PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tickets_polled_on_both_servers_at_once_are_each_served_once_postgres() {
    use semaphore_postgres::testing::TestServer;
    let (pg, schema) = (TestServer::shared(), TestServer::fresh_schema());
    served_once(&["--postgres", pg.url(), "--postgres-schema", &schema]).await;
}

async fn served_once(store: &[&str]) {
    let args = [store, &["--ticket-hold", "5s"]].concat();
    let servers = [Server::start(&args), Server::start(&args)];
    let id = pool_id();
    let pool = format!("/l/{id}");
    servers[0]
        .call("PUT", &pool, Some(json!({"count": 2})))
        .await;
    let (_, first) = post(&servers[0], &format!("{pool}/borrow"), json!({"ttl": 60})).await;
    let (_, second) = post(&servers[1], &format!("{pool}/borrow"), json!({"ttl": 60})).await;
    let mut tickets = Vec::new();
    for i in 0..12 {
        let (status, queued) = post(
            &servers[i % 2],
            &format!("{pool}/enqueue"),
            json!({"ttl": 60}),
        )
        .await;
        assert_eq!(
            (status, queued["place"].as_u64()),
            (202, Some(i as u64 + 1)),
            "{queued}"
        );
        tickets.push(queued["ticket"].clone());
    }
    let poll = |server: usize, ticket: Value| {
        let (http, url) = (
            servers[server].http.clone(),
            servers[server].url(&format!("{pool}/wait")),
        );
        async move {
            loop {
                let answer = http
                    .post(&url)
                    .json(&json!({"ticket": ticket, "wait": 5}))
                    .send()
                    .await
                    .unwrap();
                let status = answer.status().as_u16();
                let body: Value = answer.json().await.unwrap();
                match status {
                    200 => return body,
                    202 => continue,
                    _ => panic!("{status}: {body}"),
                }
            }
        }
    };
    let mut clients = Vec::new();
    for ticket in &tickets {
        let (one, two) = (poll(0, ticket.clone()), poll(1, ticket.clone()));
        let http = servers[0].http.clone();
        let back = servers[0].url(&format!("{pool}/return"));
        clients.push(tokio::spawn(async move {
            let (a, b) = tokio::join!(one, two);
            assert_eq!(a["lease"], b["lease"], "one ticket, two leases: {a} {b}");
            let start = std::time::Instant::now();
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            let held = (
                a["position"].as_u64().unwrap(),
                a["token"].as_u64().unwrap(),
            );
            // Within the true hold: after the grant, before the return.
            let end = std::time::Instant::now();
            http.post(back)
                .json(&json!({"lease": a["lease"]}))
                .send()
                .await
                .unwrap();
            (held, start, end)
        }));
    }
    post(
        &servers[0],
        &format!("{pool}/return"),
        json!({"lease": first["lease"]}),
    )
    .await;
    post(
        &servers[1],
        &format!("{pool}/return"),
        json!({"lease": second["lease"]}),
    )
    .await;
    let mut holds = Vec::new();
    for client in clients {
        holds.push(client.await.unwrap());
    }
    let mut tokens: Vec<u64> = holds.iter().map(|h| h.0.1).collect();
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), 12, "every ticket was served once");
    for a in &holds {
        for b in &holds {
            let overlap = a.1 < b.2 && b.1 < a.2;
            assert!(
                a.0.1 == b.0.1 || a.0.0 != b.0.0 || !overlap,
                "position {} held twice at once",
                a.0.0
            );
        }
    }
    let (_, state) = servers[1].call("GET", &pool, None).await;
    assert_eq!(state["in_use"], 0, "{state}");
}
