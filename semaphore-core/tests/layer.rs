//! `PoolLimitLayer` in a real axum router, served on 127.0.0.1 and called
//! over a socket.

use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use axum::{Extension, Router};
use semaphore_core::{Error, Lease, Pool, PoolId, PoolLimitLayer};
use semaphore_memory::MemoryStore;
use tokio::sync::Semaphore;

/// A router whose `/work` answers with the lease it ran under, once
/// `gate` lets it finish, and whose `/free` answers at once.
fn router(gate: Arc<Semaphore>) -> Router {
    Router::new()
        .route(
            "/work",
            get(|Extension(lease): Extension<Lease>| async move {
                drop(gate.acquire().await.unwrap());
                format!("{} {}", lease.position, lease.token)
            }),
        )
        .route(
            "/free",
            get(|Extension(lease): Extension<Lease>| async move { lease.position.to_string() }),
        )
}

/// Serves `app` on a fresh port; returns its base url.
async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

async fn pool(count: u32) -> Pool {
    let pool = Pool::new(Arc::new(MemoryStore::new()), PoolId::random());
    pool.register(count).await.unwrap();
    pool
}

/// Waits until `n` requests of this process wait on `pool`.
async fn until_waiting(pool: &Pool, n: usize) {
    while pool.waiting().count != n {
        tokio::task::yield_now().await;
    }
}

async fn get_text(url: String) -> (u16, String) {
    let response = reqwest::get(url).await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_holds_a_slot_and_sees_its_lease_and_a_full_pool_answers_503() {
    let pool = pool(1).await;
    let gate = Arc::new(Semaphore::new(0));
    let url = serve(router(gate.clone()).layer(PoolLimitLayer::new(pool.clone()))).await;

    let first = tokio::spawn(get_text(format!("{url}/work")));
    while pool.inspect().await.unwrap().in_use == 0 {
        tokio::task::yield_now().await;
    }
    assert_eq!(get_text(format!("{url}/free")).await, (503, String::new()));

    gate.add_permits(1);
    assert_eq!(first.await.unwrap(), (200, "0 1".to_owned()));
    // The lease was returned with the response: the slot serves again.
    assert_eq!(pool.inspect().await.unwrap().in_use, 0);
    assert_eq!(get_text(format!("{url}/free")).await, (200, "0".to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_waits_for_a_slot_up_to_the_configured_wait() {
    let pool = pool(1).await;
    let gate = Arc::new(Semaphore::new(0));
    let layer = PoolLimitLayer::new(pool.clone()).wait(Duration::from_secs(300));
    let url = serve(router(gate.clone()).layer(layer)).await;

    let first = tokio::spawn(get_text(format!("{url}/work")));
    while pool.inspect().await.unwrap().in_use == 0 {
        tokio::task::yield_now().await;
    }
    let second = tokio::spawn(get_text(format!("{url}/work")));
    until_waiting(&pool, 1).await;

    gate.add_permits(2);
    assert_eq!(first.await.unwrap(), (200, "0 1".to_owned()));
    assert_eq!(second.await.unwrap(), (200, "0 2".to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_rejection_answers_with_its_own_response() {
    let pool = pool(1).await;
    let held = pool
        .borrow(Duration::from_secs(60), Duration::ZERO)
        .await
        .unwrap();
    let layer = PoolLimitLayer::new(pool.clone()).reject_with(|e: &Error| {
        let mut response = axum::response::Response::new(axum::body::Body::from(format!(
            "busy: {}",
            matches!(e, Error::Exhausted { .. })
        )));
        *response.status_mut() = axum::http::StatusCode::TOO_MANY_REQUESTS;
        response
    });
    let url = serve(router(Arc::new(Semaphore::new(0))).layer(layer)).await;

    assert_eq!(
        get_text(format!("{url}/free")).await,
        (429, "busy: true".to_owned())
    );
    drop(held);
    assert_eq!(get_text(format!("{url}/free")).await, (200, "0".to_owned()));
}
