//! Weighted borrows over HTTP: `"slots": n` on
//! `POST /l/{id}/borrow`, `positions` in the answer and the holders
//! listing, against a real `semaphore serve` on 127.0.0.1.

mod common;

use common::Server;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_borrow_of_two_slots_holds_both_until_its_one_return() {
    let server = Server::start(&["--memory"]);
    let id = common::pool_id();
    let pool = format!("/l/{id}");
    server.call("PUT", &pool, Some(json!({"count": 4}))).await;
    let (status, two) = server
        .call(
            "POST",
            &format!("{pool}/borrow"),
            Some(json!({"ttl": 30, "slots": 2})),
        )
        .await;
    assert_eq!(status, 200, "{two}");
    assert_eq!(two["positions"], json!([0, 1]));
    assert_eq!(two["position"], 0, "position is the lowest");
    let (_, one) = server
        .call("POST", &format!("{pool}/borrow"), Some(json!({"ttl": 30})))
        .await;
    assert_eq!(one["positions"], json!([2]), "a plain borrow answers one");
    let (_, state) = server.call("GET", &pool, None).await;
    assert_eq!(
        (state["in_use"].clone(), state["available"].clone()),
        (json!(3), json!(1))
    );

    let (_, holders) = server.call("GET", &format!("{pool}/leases"), None).await;
    assert_eq!(holders["leases"][0]["positions"], json!([0, 1]));
    assert!(holders["leases"][0].get("lease").is_none(), "no lease ids");

    let (status, refused) = server
        .call(
            "POST",
            &format!("{pool}/borrow"),
            Some(json!({"ttl": 30, "slots": 2})),
        )
        .await;
    assert_eq!(status, 409, "one slot free is not two: {refused}");

    let (_, returned) = server
        .call(
            "POST",
            &format!("{pool}/return"),
            Some(json!({"lease": two["lease"]})),
        )
        .await;
    assert_eq!(returned, json!({"returned": true}));
    let (_, state) = server.call("GET", &pool, None).await;
    assert_eq!(state["in_use"], 1, "both slots came back with one return");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_out_of_range_are_a_400_naming_slots() {
    let server = Server::start(&["--memory"]);
    let id = common::pool_id();
    let pool = format!("/l/{id}");
    server.call("PUT", &pool, Some(json!({"count": 4}))).await;
    for slots in [json!(0), json!(1001), json!(-1), json!(1.5)] {
        let (status, body) = server
            .call(
                "POST",
                &format!("{pool}/borrow"),
                Some(json!({"ttl": 30, "slots": slots})),
            )
            .await;
        assert_eq!(status, 400, "slots {slots}: {body}");
        assert_eq!(body["field"], "slots", "{body}");
    }
    let (status, body) = server
        .call(
            "POST",
            &format!("{pool}/borrow"),
            Some(json!({"ttl": 30, "slots": "2"})),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    let (_, state) = server.call("GET", &pool, None).await;
    assert_eq!(state["in_use"], 0, "nothing was taken");
}

/// First come, first served with weights over HTTP: a waiting borrow of 3 is not overtaken by a
/// later borrow of 1 when a slot frees; each is served in arrival order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_borrow_of_three_is_served_before_a_later_one_of_one() {
    let server = std::sync::Arc::new(Server::start(&["--memory"]));
    let id = common::pool_id();
    let pool = format!("/l/{id}");
    server.call("PUT", &pool, Some(json!({"count": 4}))).await;
    let (_, held) = server
        .call(
            "POST",
            &format!("{pool}/borrow"),
            Some(json!({"ttl": 60, "slots": 2})),
        )
        .await;
    let borrow = |slots: u32| {
        let (server, path) = (server.clone(), format!("{pool}/borrow"));
        tokio::spawn(async move {
            server
                .call(
                    "POST",
                    &path,
                    Some(json!({"ttl": 60, "wait": 30, "slots": slots})),
                )
                .await
        })
    };
    let three = borrow(3);
    server.until_waiting(&id, 1).await;
    let one = borrow(1);
    server.until_waiting(&id, 2).await;
    let (_, state) = server.call("GET", &pool, None).await;
    assert_eq!(
        state["in_use"], 2,
        "two slots free, and the later borrow of 1 waits"
    );
    server
        .call(
            "POST",
            &format!("{pool}/return"),
            Some(json!({"lease": held["lease"]})),
        )
        .await;
    let (status, three) = three.await.unwrap();
    assert_eq!(
        (status, three["positions"].clone()),
        (200, json!([0, 1, 2]))
    );
    let (status, one) = one.await.unwrap();
    assert_eq!((status, one["positions"].clone()), (200, json!([3])));
}
