//! The proxy's faults, each against an echo server.

use super::*;
use tokio::net::UnixListener;
use tokio::time::timeout;

const SHORT: Duration = Duration::from_millis(200);

/// An echo server on TCP.
async fn tcp_echo() -> SocketAddr {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

async fn round_trip(s: &mut TcpStream, msg: &[u8]) -> io::Result<Vec<u8>> {
    s.write_all(msg).await?;
    let mut buf = vec![0u8; msg.len()];
    timeout(Duration::from_secs(5), s.read_exact(&mut buf))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no echo"))??;
    Ok(buf)
}

#[tokio::test]
async fn forwards_to_tcp_and_to_a_unix_socket() {
    let proxy = Proxy::start(Upstream::Tcp(tcp_echo().await)).await.unwrap();
    let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(round_trip(&mut s, b"hello").await.unwrap(), b"hello");

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("echo.sock");
    let listener = UnixListener::bind(&path).unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    let proxy = Proxy::start(Upstream::Unix(path)).await.unwrap();
    let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(
        round_trip(&mut s, b"over unix").await.unwrap(),
        b"over unix"
    );
    assert_eq!(proxy.accepted(), 1);
}

#[tokio::test]
async fn a_cut_resets_connections_and_refuses_new_ones_until_restored() {
    let proxy = Proxy::start(Upstream::Tcp(tcp_echo().await)).await.unwrap();
    let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
    round_trip(&mut s, b"a").await.unwrap();
    proxy.cut();
    assert!(
        round_trip(&mut s, b"b").await.is_err(),
        "cut connection still echoes"
    );
    // A new connection is accepted by the kernel, then reset.
    let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
    assert!(
        round_trip(&mut s, b"c").await.is_err(),
        "refused connection echoes"
    );
    proxy.restore();
    let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(round_trip(&mut s, b"d").await.unwrap(), b"d");
}

#[tokio::test]
async fn a_blip_heals_by_itself() {
    let proxy = Proxy::start(Upstream::Tcp(tcp_echo().await)).await.unwrap();
    proxy.blip(SHORT);
    let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
    assert!(round_trip(&mut s, b"a").await.is_err());
    tokio::time::sleep(SHORT * 2).await;
    let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(round_trip(&mut s, b"b").await.unwrap(), b"b");
}

#[tokio::test]
async fn a_stall_holds_bytes_and_closes_nothing_until_resumed() {
    let proxy = Proxy::start(Upstream::Tcp(tcp_echo().await)).await.unwrap();
    let mut old = TcpStream::connect(proxy.addr()).await.unwrap();
    round_trip(&mut old, b"a").await.unwrap();
    proxy.stall();
    old.write_all(b"held").await.unwrap();
    let mut fresh = TcpStream::connect(proxy.addr()).await.unwrap();
    fresh.write_all(b"new").await.unwrap();
    let mut buf = [0u8; 4];
    assert!(
        timeout(SHORT, old.read_exact(&mut buf)).await.is_err(),
        "bytes moved while stalled"
    );
    assert!(
        timeout(SHORT, fresh.read_exact(&mut buf[..3]))
            .await
            .is_err()
    );
    proxy.resume();
    timeout(Duration::from_secs(5), old.read_exact(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&buf, b"held");
    timeout(Duration::from_secs(5), fresh.read_exact(&mut buf[..3]))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&buf[..3], b"new");
}

#[tokio::test]
async fn a_partition_resumes_by_itself_and_a_later_stall_is_not_undone() {
    let proxy = Proxy::start(Upstream::Tcp(tcp_echo().await)).await.unwrap();
    let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
    proxy.partition(SHORT);
    let start = std::time::Instant::now();
    assert_eq!(round_trip(&mut s, b"late").await.unwrap(), b"late");
    assert!(start.elapsed() >= SHORT - Duration::from_millis(20));

    proxy.partition(SHORT);
    proxy.stall();
    tokio::time::sleep(SHORT * 2).await;
    s.write_all(b"x").await.unwrap();
    let mut buf = [0u8; 1];
    assert!(
        timeout(SHORT, s.read_exact(&mut buf)).await.is_err(),
        "an old timer resumed a newer stall"
    );
    proxy.heal();
    timeout(Duration::from_secs(5), s.read_exact(&mut buf))
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn dropping_the_proxy_closes_its_connections() {
    let proxy = Proxy::start(Upstream::Tcp(tcp_echo().await)).await.unwrap();
    let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
    round_trip(&mut s, b"a").await.unwrap();
    drop(proxy);
    assert!(round_trip(&mut s, b"b").await.is_err());
}

/// A delay holds every chunk at least its steady part each way, so that
/// an echo takes twice that, and jitter never reorders the bytes.
#[tokio::test]
async fn a_delay_holds_each_chunk_each_way_and_keeps_the_bytes_in_order() {
    let proxy = Proxy::start(Upstream::Tcp(tcp_echo().await)).await.unwrap();
    let each_way = Duration::from_millis(20);
    proxy.delay(each_way, Duration::from_millis(10));
    let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
    let start = std::time::Instant::now();
    assert_eq!(round_trip(&mut s, b"slow").await.unwrap(), b"slow");
    assert!(start.elapsed() >= each_way * 2, "an echo beat the delay");

    // Many small writes, each its own chunk with its own jitter.
    let sent: Vec<u8> = (0..200u16).map(|i| (i % 251) as u8).collect();
    for byte in &sent {
        s.write_all(std::slice::from_ref(byte)).await.unwrap();
    }
    let mut echoed = vec![0u8; sent.len()];
    timeout(Duration::from_secs(10), s.read_exact(&mut echoed))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(echoed, sent, "jitter reordered the bytes");

    proxy.delay(Duration::ZERO, Duration::ZERO);
    assert_eq!(round_trip(&mut s, b"fast").await.unwrap(), b"fast");
}

/// Each flight of the client's bytes that follows the server's answer
/// counts one round trip, however many writes it took.
#[tokio::test]
async fn round_trips_count_the_clients_flights() {
    let proxy = Proxy::start(Upstream::Tcp(tcp_echo().await)).await.unwrap();
    let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
    for msg in [&b"one"[..], b"two", b"three"] {
        round_trip(&mut s, msg).await.unwrap();
    }
    assert_eq!(proxy.round_trips(), 3);
    // Two writes before the (delayed) answer: one flight.
    proxy.delay(Duration::from_millis(50), Duration::ZERO);
    s.write_all(b"ab").await.unwrap();
    s.write_all(b"cd").await.unwrap();
    let mut buf = [0u8; 4];
    timeout(Duration::from_secs(5), s.read_exact(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&buf, b"abcd");
    assert_eq!(proxy.round_trips(), 4);
}
