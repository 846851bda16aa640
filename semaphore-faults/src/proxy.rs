//! A TCP proxy with faults, one per holder process, so that a fault hits
//! one holder and no other.
//!
//! It listens on `127.0.0.1:0` and forwards each connection to an upstream
//! server on TCP or on a unix socket (the throwaway servers of the store
//! crates listen on unix sockets only). Its controls, callable from any
//! thread:
//!
//! - [`cut`](Proxy::cut): every current connection is closed abruptly (a
//!   reset to the client, the upstream side closed) and new ones are reset
//!   as soon as they are accepted, until [`restore`](Proxy::restore);
//!   [`blip`](Proxy::blip) is a cut restored after a while.
//! - [`stall`](Proxy::stall): no byte moves either way and nothing is
//!   closed; new connections are accepted (the kernel does that anyway) but
//!   not forwarded, not even connected upstream; on
//!   [`resume`](Proxy::resume) everything buffered flows. This is a
//!   partition that drops packets, as the peers see it: bytes written sit
//!   in the kernel's buffers, no reset, no end of file.
//!   [`partition`](Proxy::partition) is a stall resumed after a while.
//!
//! Not the same as a real partition in one way: the loopback connection's
//! TCP acknowledges and keep-alive probes are still answered by the
//! kernel, so TCP keep-alive does not notice the stall (the throwaway
//! servers see a unix socket, which has none anyway).
//!
//! Written here rather than taken from crates.io: `noxious` (a Rust port of
//! Toxiproxy, 1.0.4 of April 2021, on tokio-util 0.6 and rand 0.8, unmaintained
//! since) forwards to TCP upstreams only and is run as a server driven over
//! HTTP; `noxious-client` and `toxiproxy_rust` are only clients of such a
//! server (Toxiproxy itself is a Go program, not on crates.io). None
//! forwards to a unix socket, which the throwaway servers need.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::watch;

mod group;
pub use group::Proxies;

/// Where a proxy forwards its connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upstream {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A unix socket's path.
    Unix(PathBuf),
}

/// The proxy's state, watched by every connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct State {
    cut: bool,
    stalled: bool,
    /// Bumped by each cut: connections accepted before it close.
    epoch: u64,
}

impl State {
    fn flowing(&self) -> bool {
        !self.cut && !self.stalled
    }
}

/// A running proxy; clones share it. Dropping the last clone stops it and
/// closes its connections.
#[derive(Debug, Clone)]
pub struct Proxy {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    addr: SocketAddr,
    state: watch::Sender<State>,
    /// Counts the cuts and the stalls, so that a timed restore or resume
    /// undoes only its own fault, not a newer one.
    cuts: AtomicU64,
    stalls: AtomicU64,
    accepted: Arc<AtomicU64>,
    handle: tokio::runtime::Handle,
    accept: tokio::task::AbortHandle,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl Proxy {
    /// Starts a proxy to `upstream` on `127.0.0.1` and a free port, on the
    /// current tokio runtime (which must have the `net` and `time` drivers
    /// and keep running while the proxy is used).
    ///
    /// # Errors
    /// If the listener cannot be bound.
    pub async fn start(upstream: Upstream) -> io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (state, _) = watch::channel(State::default());
        let accepted = Arc::new(AtomicU64::new(0));
        let accept = tokio::spawn(accept_loop(
            listener,
            Arc::new(upstream),
            state.clone(),
            accepted.clone(),
        ))
        .abort_handle();
        Ok(Self {
            inner: Arc::new(Inner {
                addr,
                state,
                cuts: AtomicU64::new(0),
                stalls: AtomicU64::new(0),
                accepted,
                handle: tokio::runtime::Handle::current(),
                accept,
            }),
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.inner.addr.port()
    }

    /// How many connections were accepted so far (refused ones included).
    pub fn accepted(&self) -> u64 {
        self.inner.accepted.load(Ordering::Relaxed)
    }

    /// Closes every current connection abruptly and resets new ones until
    /// [`restore`](Proxy::restore).
    pub fn cut(&self) {
        self.inner.cuts.fetch_add(1, Ordering::SeqCst);
        self.inner.state.send_modify(|s| {
            s.cut = true;
            s.epoch += 1;
        });
    }

    /// Accepts and forwards connections again after a [`cut`](Proxy::cut).
    pub fn restore(&self) {
        self.inner.state.send_modify(|s| s.cut = false);
    }

    /// A [`cut`](Proxy::cut), [restored](Proxy::restore) after `d` unless
    /// another cut came meanwhile (that one's restore then counts).
    pub fn blip(&self, d: Duration) {
        self.cut();
        let mine = self.inner.cuts.load(Ordering::SeqCst);
        self.after(d, move |p| {
            if p.inner.cuts.load(Ordering::SeqCst) == mine {
                p.restore();
            }
        });
    }

    /// Stops moving bytes either way, closing nothing, until
    /// [`resume`](Proxy::resume).
    pub fn stall(&self) {
        self.inner.stalls.fetch_add(1, Ordering::SeqCst);
        self.inner.state.send_modify(|s| s.stalled = true);
    }

    /// Lets the bytes flow again after a [`stall`](Proxy::stall).
    pub fn resume(&self) {
        self.inner.state.send_modify(|s| s.stalled = false);
    }

    /// A [`stall`](Proxy::stall), [resumed](Proxy::resume) after `d`
    /// unless another stall came meanwhile.
    pub fn partition(&self, d: Duration) {
        self.stall();
        let mine = self.inner.stalls.load(Ordering::SeqCst);
        self.after(d, move |p| {
            if p.inner.stalls.load(Ordering::SeqCst) == mine {
                p.resume();
            }
        });
    }

    /// Ends every fault at once: restored and resumed.
    pub fn heal(&self) {
        self.inner.state.send_modify(|s| {
            s.cut = false;
            s.stalled = false;
        });
    }

    fn after(&self, d: Duration, then: impl FnOnce(Proxy) + Send + 'static) {
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        self.inner.handle.spawn(async move {
            tokio::time::sleep(d).await;
            if let Some(inner) = weak.upgrade() {
                then(Proxy { inner });
            }
        });
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: Arc<Upstream>,
    state: watch::Sender<State>,
    accepted: Arc<AtomicU64>,
) {
    loop {
        let client = match listener.accept().await {
            Ok((client, _)) => client,
            Err(_) => {
                // Out of descriptors, say: try again shortly.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        accepted.fetch_add(1, Ordering::Relaxed);
        let now = *state.borrow();
        if now.cut {
            let _ = client.set_zero_linger();
            drop(client);
            continue;
        }
        tokio::spawn(serve(
            client,
            upstream.clone(),
            state.subscribe(),
            now.epoch,
        ));
    }
}

/// Forwards one connection until either side closes it or a cut comes;
/// a cut (or an upstream that cannot be reached) resets the client.
async fn serve(
    mut client: TcpStream,
    upstream: Arc<Upstream>,
    state: watch::Receiver<State>,
    epoch: u64,
) {
    let _ = client.set_nodelay(true);
    let abrupt = {
        let mut cuts = state.clone();
        let work = forward(&mut client, &upstream, state);
        tokio::select! {
            _ = cuts.wait_for(|s| s.epoch != epoch) => true,
            done = work => done.is_err(),
        }
    };
    if abrupt {
        let _ = client.set_zero_linger();
    }
}

async fn forward(
    client: &mut TcpStream,
    upstream: &Upstream,
    mut state: watch::Receiver<State>,
) -> io::Result<()> {
    flowing(&mut state).await?;
    match upstream {
        Upstream::Tcp(addr) => {
            let server = TcpStream::connect(addr).await?;
            let _ = server.set_nodelay(true);
            pipe(client, server, state).await
        }
        Upstream::Unix(path) => pipe(client, UnixStream::connect(path).await?, state).await,
    }
}

async fn pipe<U: AsyncRead + AsyncWrite>(
    client: &mut TcpStream,
    server: U,
    state: watch::Receiver<State>,
) -> io::Result<()> {
    let (mut client_r, mut client_w) = client.split();
    let (mut server_r, mut server_w) = tokio::io::split(server);
    let up = copy(&mut client_r, &mut server_w, state.clone());
    let down = copy(&mut server_r, &mut client_w, state);
    tokio::try_join!(up, down).map(drop)
}

/// Copies one direction, moving no byte while the proxy is stalled; at
/// the end of the input it closes the output's write side.
async fn copy<R, W>(r: &mut R, w: &mut W, mut state: watch::Receiver<State>) -> io::Result<()>
where
    R: AsyncRead + Unpin + ?Sized,
    W: AsyncWrite + Unpin + ?Sized,
{
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        flowing(&mut state).await?;
        let n = r.read(&mut buf).await?;
        if n == 0 {
            return w.shutdown().await;
        }
        flowing(&mut state).await?;
        w.write_all(&buf[..n]).await?;
    }
}

/// Waits until the proxy is neither cut nor stalled; an error once the
/// proxy is gone.
async fn flowing(state: &mut watch::Receiver<State>) -> io::Result<()> {
    state
        .wait_for(State::flowing)
        .await
        .map(drop)
        .map_err(|_| io::Error::new(io::ErrorKind::ConnectionAborted, "the proxy stopped"))
}

#[cfg(test)]
mod tests {
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
}
