//! Line 27: the networked stores behind the fault suite's proxy, which
//! holds every chunk [`EACH_WAY`] plus a jitter, beside their anchors
//! through the same proxy.

use std::path::Path;
use std::time::Duration;

use semaphore_benches::{commits, median};

use super::{COUNT, POOL, ROUNDS, TTL, ours, ours_with, peer, row};

/// The proxy's delay each way, and its most jitter (line 27).
const EACH_WAY: Duration = Duration::from_micros(250);
const JITTER: Duration = Duration::from_micros(50);
/// Line 27's case: hold 2 ms, think 2 ms.
const NETWORKED_CASE: (u64, u64) = (2, 2);

/// Line 27's rows: each networked store on a server of its own behind a
/// proxy of [`EACH_WAY`]; the working case, then 1 task's zero-hold
/// pairs and the round trips a pair took.
pub(super) async fn behind_the_proxy(npm: &Path) -> Vec<String> {
    use semaphore_faults::{Server, StoreKind};
    let echo = echo_round_trip().await;
    let mut rows = vec![format!(
        "| 27. the proxy's own round trip (1-byte echo, 0.25 ms each way) | | {:.0} round trips/s | {echo:.0} µs each |",
        1e6 / echo
    )];
    for (name, kind) in [
        ("Redis", StoreKind::Redis),
        ("PostgreSQL", StoreKind::Postgres),
        ("MySQL", StoreKind::Mysql),
    ] {
        let (server, prefix, proxy) = Server::proxied(kind, POOL, COUNT, TTL).await;
        proxy.delay(EACH_WAY, JITTER);
        let (url, _) = server.holder_url(proxy.port(), 0);
        let at = proxy.addr().to_string();
        let (mut working, mut peer_working, mut one) = (Vec::new(), Vec::new(), Vec::new());
        let mut anchor = Vec::new();
        for _ in 0..ROUNDS {
            let (url2, prefix2) = (url.clone(), prefix.clone());
            working.push(blocking(move || ours(&url2, &prefix2, NETWORKED_CASE)).await);
            if kind == StoreKind::Redis {
                let (npm, at) = (npm.to_path_buf(), at.clone());
                peer_working.push(blocking(move || peer(&npm, &at, NETWORKED_CASE)).await);
            }
            let (url2, prefix2) = (url.clone(), prefix.clone());
            let before = proxy.round_trips();
            let f = blocking(move || ours_with(&url2, &prefix2, (0, 0), (1, 1))).await;
            let trips = (proxy.round_trips() - before) as f64 / f.holds.max(1) as f64;
            one.push((f.pairs_per_s, trips));
            let (url2, port) = (url.clone(), proxy.port());
            anchor.extend(blocking(move || commits::two_updates(name, &url2, port)).await);
        }
        let name = format!("27. {name} behind the proxy (0.25 ms each way)");
        rows.push(row(&name, NETWORKED_CASE, &working));
        if !peer_working.is_empty() {
            let peer_name = "27. redis-semaphore (peer) behind the proxy";
            rows.push(row(peer_name, NETWORKED_CASE, &peer_working));
        }
        let ours_one = median(one.iter().map(|o| o.0).collect());
        rows.push(format!(
            "| {name}, 1 task, zero hold | | {ours_one:.0} | {:.1} round trips a pair |",
            median(one.iter().map(|o| o.1).collect()),
        ));
        rows.extend(commits::two_updates_row(&name, ours_one, anchor));
    }
    rows
}

/// The median time (µs) of a 1-byte echo through a proxy of line 27's
/// delay, from this process: what the stores' round trips cost at least.
async fn echo_round_trip() -> f64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .expect("a port");
    let upstream = listener.local_addr().expect("its address");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    let proxy =
        semaphore_faults::proxy::Proxy::start(semaphore_faults::proxy::Upstream::Tcp(upstream))
            .await
            .expect("a proxy");
    proxy.delay(EACH_WAY, JITTER);
    let mut s = tokio::net::TcpStream::connect(proxy.addr())
        .await
        .expect("a connection");
    s.set_nodelay(true).expect("no delay");
    let mut times = Vec::new();
    let mut byte = [0u8; 1];
    for _ in 0..1000 {
        let start = std::time::Instant::now();
        s.write_all(b"x").await.expect("a write");
        s.read_exact(&mut byte).await.expect("an echo");
        times.push(start.elapsed().as_secs_f64() * 1e6);
    }
    median(times)
}

/// `f` on a thread of its own: the workers' processes are waited for
/// there, not on the runtime that runs the proxy.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("a run")
}
