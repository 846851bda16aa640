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
//! - [`delay`](Proxy::delay): a network between client and server, for
//!   benchmarks and tests that must not run on loopback's few
//!   microseconds: every chunk of bytes, either way, is held a steady
//!   one-way delay plus a jitter drawn at random, and delivered in order
//!   (as TCP delivers; this machine has no `netem`). Reading goes on while
//!   chunks wait, so the delay adds latency, not a limit on throughput.
//!   [`round_trips`](Proxy::round_trips) counts the client's flights: what
//!   a delay costs a call is its round trips times twice the delay.
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
mod precise;
pub use group::Proxies;

/// A one-way delay: each chunk of bytes is held `each_way` plus a jitter
/// drawn uniformly from `0..=jitter`, and never overtakes the chunk before
/// it ([`Proxy::delay`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Delay {
    /// The steady part, the same for every chunk.
    each_way: Duration,
    /// The most a chunk is held beyond `each_way`.
    jitter: Duration,
}

impl Delay {
    /// When a chunk read `now` is due, its delay drawn. Chunks are written
    /// one after another, so one due before the chunk ahead of it waits
    /// for that one: nothing is reordered.
    fn due(self, now: std::time::Instant) -> std::time::Instant {
        let jitter = u64::try_from(self.jitter.as_nanos()).unwrap_or(u64::MAX);
        now + self.each_way + Duration::from_nanos(fastrand::u64(0..=jitter))
    }
}

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
    /// Applied to each chunk read from now on.
    delay: Delay,
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
    /// The clients' flights of bytes, over every connection.
    round_trips: Arc<AtomicU64>,
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
        let round_trips = Arc::new(AtomicU64::new(0));
        let accept = tokio::spawn(accept_loop(
            listener,
            Arc::new(upstream),
            state.clone(),
            Counts {
                accepted: accepted.clone(),
                round_trips: round_trips.clone(),
            },
        ))
        .abort_handle();
        Ok(Self {
            inner: Arc::new(Inner {
                addr,
                state,
                cuts: AtomicU64::new(0),
                stalls: AtomicU64::new(0),
                accepted,
                round_trips,
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

    /// The round trips clients made so far, over every connection: each
    /// flight of bytes from a client that follows bytes from the server
    /// (or opens the connection) counts one, however many writes it took.
    /// A call's round trips are the count's difference across it.
    pub fn round_trips(&self) -> u64 {
        self.inner.round_trips.load(Ordering::Relaxed)
    }

    /// Holds every chunk of bytes read from now on, either way, `each_way`
    /// plus a jitter drawn uniformly from `0..=jitter` (to within the
    /// kernel's timer slack, about 50 µs), delivering chunks in order: a
    /// round trip then takes at least twice `each_way`. Zero for both
    /// ends the delay (the default). Chunks already held keep theirs.
    pub fn delay(&self, each_way: Duration, jitter: Duration) {
        self.inner
            .state
            .send_modify(|s| s.delay = Delay { each_way, jitter });
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

/// What a proxy counts, shared by its connections.
#[derive(Debug, Clone)]
struct Counts {
    accepted: Arc<AtomicU64>,
    round_trips: Arc<AtomicU64>,
}

async fn accept_loop(
    listener: TcpListener,
    upstream: Arc<Upstream>,
    state: watch::Sender<State>,
    counts: Counts,
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
        counts.accepted.fetch_add(1, Ordering::Relaxed);
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
            counts.round_trips.clone(),
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
    round_trips: Arc<AtomicU64>,
) {
    let _ = client.set_nodelay(true);
    let abrupt = {
        let mut cuts = state.clone();
        let work = forward(&mut client, &upstream, state, &round_trips);
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
    round_trips: &AtomicU64,
) -> io::Result<()> {
    flowing(&mut state).await?;
    match upstream {
        Upstream::Tcp(addr) => {
            let server = TcpStream::connect(addr).await?;
            let _ = server.set_nodelay(true);
            pipe(client, server, state, round_trips).await
        }
        Upstream::Unix(path) => {
            let server = UnixStream::connect(path).await?;
            pipe(client, server, state, round_trips).await
        }
    }
}

async fn pipe<U: AsyncRead + AsyncWrite>(
    client: &mut TcpStream,
    server: U,
    state: watch::Receiver<State>,
    round_trips: &AtomicU64,
) -> io::Result<()> {
    let (mut client_r, mut client_w) = client.split();
    let (mut server_r, mut server_w) = tokio::io::split(server);
    // Whether the client spoke last: its next flight after the server's
    // answer is a round trip.
    let client_last = std::sync::atomic::AtomicBool::new(false);
    let up = copy(&mut client_r, &mut server_w, state.clone(), || {
        if !client_last.swap(true, Ordering::Relaxed) {
            round_trips.fetch_add(1, Ordering::Relaxed);
        }
    });
    let down = copy(&mut server_r, &mut client_w, state, || {
        client_last.store(false, Ordering::Relaxed);
    });
    tokio::try_join!(up, down).map(drop)
}

/// Chunks read and not yet written, at most: a reader that gets this far
/// ahead of a delayed writer waits.
const IN_FLIGHT: usize = 64;

/// Copies one direction, moving no byte while the proxy is stalled, each
/// chunk held by the proxy's [`Delay`] as it was when the chunk was read
/// (reading goes on meanwhile); `read` is told of each chunk read. At the
/// end of the input it closes the output's write side, once every chunk
/// read was written.
async fn copy<R, W>(
    r: &mut R,
    w: &mut W,
    state: watch::Receiver<State>,
    read: impl Fn(),
) -> io::Result<()>
where
    R: AsyncRead + Unpin + ?Sized,
    W: AsyncWrite + Unpin + ?Sized,
{
    let (chunks, mut held) = tokio::sync::mpsc::channel::<(std::time::Instant, Vec<u8>)>(IN_FLIGHT);
    let mut reading = state.clone();
    let reader = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            flowing(&mut reading).await?;
            let n = r.read(&mut buf).await?;
            if n == 0 {
                return Ok::<_, io::Error>(());
            }
            read();
            let due = reading.borrow().delay.due(std::time::Instant::now());
            if chunks.send((due, buf[..n].to_vec())).await.is_err() {
                return Ok(());
            }
        }
    };
    let mut writing = state;
    let writer = async move {
        while let Some((at, chunk)) = held.recv().await {
            precise::sleep_until(at).await;
            flowing(&mut writing).await?;
            w.write_all(&chunk).await?;
        }
        w.shutdown().await
    };
    tokio::try_join!(reader, writer).map(drop)
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
mod tests;
