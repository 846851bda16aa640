//! Two-phase borrows over HTTP (`/enqueue`, `/wait`, `/cancel`), against
//! the binary on 127.0.0.1, on the memory, SQLite and PostgreSQL stores: a
//! ticket keeps its place across reconnects, an abandoned one is dropped
//! within the hold and its slot goes to the next client, a cancelled one is
//! gone.

mod common;

use common::{Server, pool_id};
use semaphore_postgres::testing::TestServer;
use serde_json::{Value, json};

/// A server on each store, with `extra` flags.
fn servers(dir: &tempfile::TempDir, extra: &[&str]) -> Vec<Server> {
    let (pg, schema) = (TestServer::shared(), TestServer::fresh_schema());
    let db = dir.path().join("two-phase.db");
    let stores: [Vec<&str>; 3] = [
        vec!["--memory"],
        vec!["--sqlite", db.to_str().unwrap()],
        vec!["--postgres", pg.url(), "--postgres-schema", &schema],
    ];
    stores
        .iter()
        .map(|store| Server::start(&[store.as_slice(), extra].concat()))
        .collect()
}

/// POSTs `body` to `path` on a new connection (a client that reconnects).
async fn fresh(server: &Server, path: &str, body: Value) -> (u16, Value) {
    let answer = reqwest::Client::new()
        .post(server.url(path))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = answer.status().as_u16();
    (status, answer.json().await.unwrap())
}

/// A borrow on its own task: `(status, body)` when it ends.
fn borrow_later(server: &Server, pool: &str, wait: u64) -> tokio::task::JoinHandle<(u16, Value)> {
    let (http, url) = (server.http.clone(), server.url(&format!("{pool}/borrow")));
    tokio::spawn(async move {
        let answer = http
            .post(url)
            .json(&json!({"ttl": 60, "wait": wait}))
            .send()
            .await
            .unwrap();
        (answer.status().as_u16(), answer.json().await.unwrap())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_polled_every_two_seconds_for_twenty_keeps_its_place_ahead_of_later_clients() {
    let dir = tempfile::tempdir().unwrap();
    let servers = servers(&dir, &["--ticket-hold", "3s"]);
    let runs = servers.iter().map(|server| async move {
        let id = pool_id();
        let pool = format!("/l/{id}");
        server.call("PUT", &pool, Some(json!({"count": 1}))).await;
        let (_, held) = server
            .call("POST", &format!("{pool}/borrow"), Some(json!({"ttl": 60})))
            .await;
        let (status, queued) = fresh(server, &format!("{pool}/enqueue"), json!({"ttl": 60})).await;
        assert_eq!(status, 202, "{queued}");
        assert_eq!(
            (queued["place"].as_u64(), queued["poll_within"].as_f64()),
            (Some(1), Some(3.0))
        );
        let ticket = queued["ticket"].clone();
        // Later clients: a plain borrower, and a second ticket.
        let later = borrow_later(server, &pool, 30);
        // The ticket, and the later borrower.
        server.until_waiting(&id, 2).await;
        let mut second = fresh(server, &format!("{pool}/enqueue"), json!({"ttl": 60}))
            .await
            .1;
        while second["place"] == 2 {
            // The later borrower waits in the server, but has not yet taken
            // its place in the store: come after it.
            let cancel = json!({"ticket": second["ticket"]});
            fresh(server, &format!("{pool}/cancel"), cancel).await;
            second = fresh(server, &format!("{pool}/enqueue"), json!({"ttl": 60}))
                .await
                .1;
        }
        assert_eq!(second["place"], 3, "{second}");
        let wait = format!("{pool}/wait");
        let poll = |ticket: &Value| fresh(server, &wait, json!({"ticket": ticket, "wait": 2}));
        for _ in 0..10 {
            let (first, other) = tokio::join!(poll(&ticket), poll(&second["ticket"]));
            assert_eq!(
                (first.0, first.1["place"].as_u64()),
                (202, Some(1)),
                "{first:?}"
            );
            assert_eq!(
                (other.0, other.1["place"].as_u64()),
                (202, Some(3)),
                "{other:?}"
            );
        }
        server
            .call(
                "POST",
                &format!("{pool}/return"),
                Some(json!({"lease": held["lease"]})),
            )
            .await;
        let (status, lease) = fresh(
            server,
            &format!("{pool}/wait"),
            json!({"ticket": ticket, "wait": 10}),
        )
        .await;
        assert_eq!(
            (status, lease["position"].as_u64()),
            (200, Some(0)),
            "{lease}"
        );
        assert!(!later.is_finished(), "the later borrower still waits");
        // A repeated poll (its answer lost) gets the same lease.
        let (status, again) = fresh(
            server,
            &format!("{pool}/wait"),
            json!({"ticket": ticket, "wait": 0}),
        )
        .await;
        assert_eq!((status, &again["lease"]), (200, &lease["lease"]));
        server
            .call(
                "POST",
                &format!("{pool}/return"),
                Some(json!({"lease": lease["lease"]})),
            )
            .await;
        let (status, body) = later.await.unwrap();
        assert_eq!(status, 200, "the later borrower comes next: {body}");
        let (status, body) = fresh(
            server,
            &format!("{pool}/wait"),
            json!({"ticket": second["ticket"], "wait": 0}),
        )
        .await;
        assert_eq!((status, body["place"].as_u64()), (202, Some(1)), "{body}");
    });
    futures_join_all(runs).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_ticket_is_dropped_within_its_hold_and_its_slot_goes_to_the_next_client() {
    let dir = tempfile::tempdir().unwrap();
    let servers = servers(&dir, &["--ticket-hold", "1s"]);
    let runs = servers.iter().map(|server| async move {
        let id = pool_id();
        let pool = format!("/l/{id}");
        server.call("PUT", &pool, Some(json!({"count": 1}))).await;
        let (_, held) = server
            .call("POST", &format!("{pool}/borrow"), Some(json!({"ttl": 60})))
            .await;
        let (_, abandoned) = server
            .call("POST", &format!("{pool}/enqueue"), Some(json!({"ttl": 60})))
            .await;
        let next = borrow_later(server, &pool, 30);
        // The ticket, and the next borrower.
        server.until_waiting(&id, 2).await;
        // Returned while the abandoned ticket heads the queue: the store
        // keeps the slot free for the ticket's next poll, which never
        // comes, until its place goes.
        server
            .call(
                "POST",
                &format!("{pool}/return"),
                Some(json!({"lease": held["lease"]})),
            )
            .await;
        let (status, body) = next.await.unwrap();
        assert_eq!(
            (status, body["position"].as_u64()),
            (200, Some(0)),
            "{body}"
        );
        let (status, body) = server
            .call(
                "POST",
                &format!("{pool}/wait"),
                Some(json!({"ticket": abandoned["ticket"], "wait": 0})),
            )
            .await;
        assert_eq!(
            (status, body["code"].as_str()),
            (404, Some("ticket_not_found"))
        );
        let (_, state) = server.call("GET", &pool, None).await;
        assert_eq!(state["in_use"], 1, "only the next client's lease: {state}");
    });
    futures_join_all(runs).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_ticket_leaves_the_queue_and_bad_tickets_are_refused() {
    let server = Server::start(&["--memory"]);
    let id = pool_id();
    let pool = format!("/l/{id}");
    server.call("PUT", &pool, Some(json!({"count": 1}))).await;
    let (status, granted) = server
        .call(
            "POST",
            &format!("{pool}/enqueue"),
            Some(json!({"ttl": 60, "owner": "a"})),
        )
        .await;
    assert_eq!(
        (status, granted["position"].as_u64()),
        (200, Some(0)),
        "a free slot at once"
    );
    let (_, ticket) = server
        .call("POST", &format!("{pool}/enqueue"), Some(json!({"ttl": 60})))
        .await;
    let cancel = json!({"ticket": ticket["ticket"]});
    let (status, body) = server
        .call("POST", &format!("{pool}/cancel"), Some(cancel.clone()))
        .await;
    assert_eq!((status, body["cancelled"].as_bool()), (200, Some(true)));
    assert_eq!(server.waiting(&id).await, 0);
    // The rules' route for the same: the ticket is gone.
    let tickets = format!("{pool}/tickets/{}", cancel["ticket"].as_str().unwrap());
    let (status, body) = server.call("DELETE", &tickets, None).await;
    assert_eq!((status, body["cancelled"].as_bool()), (200, Some(false)));
    for (body, status, code) in [
        (json!({"ticket": "nope"}), 400, "bad_request"),
        (json!({"ticket": uuid_v4()}), 400, "bad_request"),
        (json!({"ticket": "h1.e30"}), 404, "ticket_not_found"),
        (
            json!({"ticket": ticket["ticket"], "wait": -1}),
            400,
            "bad_request",
        ),
        (
            json!({"ticket": ticket["ticket"], "extra": 1}),
            400,
            "bad_request",
        ),
    ] {
        let (got, answer) = server
            .call("POST", &format!("{pool}/wait"), Some(body))
            .await;
        assert_eq!(
            (got, answer["code"].as_str()),
            (status, Some(code)),
            "{answer}"
        );
    }
    // A ticket is its pool's: another pool's id does not find it.
    let (_, other) = server
        .call("POST", &format!("{pool}/enqueue"), Some(json!({"ttl": 60})))
        .await;
    let elsewhere = format!("/l/{}", pool_id());
    let (status, _) = server
        .call(
            "POST",
            &format!("{elsewhere}/wait"),
            Some(json!({"ticket": other["ticket"]})),
        )
        .await;
    assert_eq!(status, 404);
    let (status, body) = server
        .call(
            "POST",
            &format!("{}/enqueue", elsewhere),
            Some(json!({"ttl": 60})),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("not_found")),
        "{body}"
    );
}

fn uuid_v4() -> String {
    pool_id()
}

/// Runs the three stores' runs at once.
async fn futures_join_all<F: std::future::Future<Output = ()>>(runs: impl IntoIterator<Item = F>) {
    let mut runs = runs.into_iter();
    let mut next = || runs.next().expect("one run per store");
    tokio::join!(next(), next(), next());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_server_grants_its_tickets_nothing_until_its_drain_ends() {
    let server = Server::start(&["--memory"]);
    let id = pool_id();
    let pool = format!("/l/{id}");
    server.call("PUT", &pool, Some(json!({"count": 1}))).await;
    let (_, held) = server
        .call("POST", &format!("{pool}/borrow"), Some(json!({"ttl": 60})))
        .await;
    let (_, ticket) = server
        .call("POST", &format!("{pool}/enqueue"), Some(json!({"ttl": 60})))
        .await;
    let signal = |name: &str| {
        let status = std::process::Command::new("kill")
            .args([&format!("-{name}"), &server.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    };
    signal("USR1");
    while server.call("GET", "/readyz", None).await.0 == 200 {
        tokio::task::yield_now().await;
    }
    let poll = json!({"ticket": ticket["ticket"], "wait": 0});
    let (status, body) = server
        .call("POST", &format!("{pool}/wait"), Some(poll.clone()))
        .await;
    assert_eq!((status, body["code"].as_str()), (503, Some("draining")));
    let (status, _) = server
        .call("POST", &format!("{pool}/enqueue"), Some(json!({"ttl": 60})))
        .await;
    assert_eq!(status, 503);
    // The holder returns; the ticket is granted nothing while the server
    // drains, but keeps its place.
    server
        .call(
            "POST",
            &format!("{pool}/return"),
            Some(json!({"lease": held["lease"]})),
        )
        .await;
    let (_, state) = server.call("GET", &pool, None).await;
    assert_eq!(state["in_use"], 0, "{state}");
    signal("USR2");
    while server.call("GET", "/readyz", None).await.0 != 200 {
        tokio::task::yield_now().await;
    }
    let (status, body) = server
        .call("POST", &format!("{pool}/wait"), Some(poll))
        .await;
    assert_eq!((status, &body["position"]), (200, &json!(0)), "{body}");
}

/// A ticket is spent with its lease, on every store: asked again while the
/// lease is active it answers that lease; once the lease was returned and
/// its position granted to another client, it answers 404, not the old
/// lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_whose_lease_was_returned_is_spent_on_every_store() {
    let dir = tempfile::tempdir().unwrap();
    for server in servers(&dir, &[]) {
        let pool = format!("/l/{}", pool_id());
        let call = |path: &str, body: Value| post(&server, format!("{pool}{path}"), body);
        server.call("PUT", &pool, Some(json!({"count": 1}))).await;
        let (_, held) = call("/borrow", json!({"ttl": 60})).await;
        let (status, queued) = call("/enqueue", json!({"ttl": 60})).await;
        assert_eq!(status, 202, "{queued}");
        let ticket = queued["ticket"].clone();
        call("/return", json!({"lease": held["lease"]})).await;
        let poll = json!({"ticket": ticket, "wait": 30});
        let (status, lease) = call("/wait", poll.clone()).await;
        assert_eq!((status, &lease["position"]), (200, &json!(0)), "{lease}");
        let (status, again) = call("/wait", poll.clone()).await;
        assert_eq!((status, &again["lease"]), (200, &lease["lease"]), "{again}");
        call("/return", json!({"lease": lease["lease"]})).await;
        let (status, other) = call("/borrow", json!({"ttl": 60})).await;
        assert_eq!((status, &other["position"]), (200, &json!(0)), "{other}");
        let (status, spent) = call("/wait", poll).await;
        assert_eq!(
            (status, spent["code"].as_str()),
            (404, Some("ticket_not_found")),
            "{spent}"
        );
    }
}

/// One pool keeps at most 1,000 tickets, on every store: the next enqueue
/// on it answers 503 `too_many_tickets`, while another pool's enqueue is
/// still queued (one pool's clients cannot use up the server's tickets, nor
/// grow a shared store's queue without bound).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_pools_tickets_are_capped_and_other_pools_still_enqueue() {
    let dir = tempfile::tempdir().unwrap();
    for server in servers(&dir, &[]) {
        let (full, other) = (format!("/l/{}", pool_id()), format!("/l/{}", pool_id()));
        for pool in [&full, &other] {
            server.call("PUT", pool, Some(json!({"count": 1}))).await;
            server
                .call("POST", &format!("{pool}/borrow"), Some(json!({"ttl": 600})))
                .await;
        }
        let enqueue = |pool: &str| post(&server, format!("{pool}/enqueue"), json!({"ttl": 60}));
        for _ in 0..1_000 {
            let (status, body) = enqueue(&full).await;
            assert_eq!(status, 202, "{body}");
        }
        let (status, body) = enqueue(&full).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (503, Some("too_many_tickets")),
            "{body}"
        );
        let (status, body) = enqueue(&other).await;
        assert_eq!(status, 202, "{body}");
    }
}

async fn post(server: &Server, path: String, body: Value) -> (u16, Value) {
    server.call("POST", &path, Some(body)).await
}

/// A ticket for more slots than the pool's count keeps its
/// place but holds back no one: every later borrow of one, with no wait,
/// is granted while the pool has room (on the memory store each answered
/// 409 while the pool showed 4 free). Raised to its weight, the pool owes
/// the ticket every slot: a newcomer is refused and the ticket's poll is
/// granted all five.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_for_more_slots_than_the_count_holds_back_no_one() {
    let dir = tempfile::tempdir().unwrap();
    for server in servers(&dir, &[]) {
        let pool = format!("/l/{}", pool_id());
        server.call("PUT", &pool, Some(json!({"count": 4}))).await;
        let (status, queued) = post(
            &server,
            format!("{pool}/enqueue"),
            json!({"ttl": 60, "slots": 5}),
        )
        .await;
        assert_eq!(status, 202, "{queued}");
        let ticket = queued["ticket"].clone();
        let mut leases = Vec::new();
        for n in 0..4 {
            let (status, lease) = post(&server, format!("{pool}/borrow"), json!({"ttl": 60})).await;
            assert_eq!(status, 200, "borrow {n} of 4 free slots: {lease}");
            leases.push(lease["lease"].clone());
            let poll = json!({"ticket": ticket, "wait": 0});
            let (status, body) = post(&server, format!("{pool}/wait"), poll).await;
            assert_eq!(status, 202, "the ticket keeps its place: {body}");
        }
        server.call("PUT", &pool, Some(json!({"count": 5}))).await;
        for lease in leases {
            post(&server, format!("{pool}/return"), json!({"lease": lease})).await;
        }
        let (status, body) = post(&server, format!("{pool}/borrow"), json!({"ttl": 60})).await;
        assert_eq!(status, 409, "the slots are the ticket's now: {body}");
        let poll = json!({"ticket": ticket, "wait": 5});
        let (status, lease) = post(&server, format!("{pool}/wait"), poll).await;
        assert_eq!(status, 200, "{lease}");
        assert_eq!(lease["positions"], json!([0, 1, 2, 3, 4]));
    }
}

/// A ticket enqueued with `wait_while_draining` on a draining pool keeps a
/// real place behind the tickets taken before it, on every store: its
/// polls during the drain answer 202 with that place (not 404), and once
/// the drain ends the earlier ticket is served first, then this one.
/// (It answered `place: 1` and then `ticket_not_found` at every poll: the
/// store wrote no place while the pool drained.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_enqueued_while_its_pool_drains_keeps_a_real_place() {
    let dir = tempfile::tempdir().unwrap();
    for server in servers(&dir, &[]) {
        let pool = format!("/l/{}", pool_id());
        let call = |path: &str, body: Value| post(&server, format!("{pool}{path}"), body);
        server.call("PUT", &pool, Some(json!({"count": 1}))).await;
        let (_, held) = call("/borrow", json!({"ttl": 60})).await;
        let (status, earlier) = call("/enqueue", json!({"ttl": 60})).await;
        assert_eq!((status, &earlier["place"]), (202, &json!(1)), "{earlier}");
        let (status, _) = server
            .call("PUT", &pool, Some(json!({"count": 1, "draining": true})))
            .await;
        assert_eq!(status, 200);
        let (status, later) =
            call("/enqueue", json!({"ttl": 60, "wait_while_draining": true})).await;
        assert_eq!((status, &later["place"]), (202, &json!(2)), "{later}");
        let poll = json!({"ticket": later["ticket"], "wait": 0.2});
        let (status, polled) = call("/wait", poll.clone()).await;
        assert_eq!((status, &polled["place"]), (202, &json!(2)), "{polled}");
        server
            .call("PUT", &pool, Some(json!({"count": 1, "draining": false})))
            .await;
        call("/return", json!({"lease": held["lease"]})).await;
        let (status, polled) = call("/wait", poll.clone()).await;
        assert_eq!((status, &polled["place"]), (202, &json!(2)), "{polled}");
        let (status, first) = call("/wait", json!({"ticket": earlier["ticket"], "wait": 30})).await;
        assert_eq!((status, &first["position"]), (200, &json!(0)), "{first}");
        call("/return", json!({"lease": first["lease"]})).await;
        let (status, second) = call("/wait", json!({"ticket": later["ticket"], "wait": 30})).await;
        assert_eq!((status, &second["position"]), (200, &json!(0)), "{second}");
    }
}
