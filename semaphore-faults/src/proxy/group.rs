//! [`Proxies`]: one holder's proxies, one per node, faulted together.

use std::io;
use std::time::Duration;

use super::{Proxy, Upstream};

/// One holder's proxies: one per upstream (a server has one; a Redis
/// Cluster one per node, so that a holder's fault cuts it off from every
/// node and from no other holder). A fault on them hits them all at once.
#[derive(Debug, Clone)]
pub struct Proxies(Vec<(Upstream, Proxy)>);

impl Proxies {
    /// A proxy to each of `upstreams`, on the current tokio runtime.
    ///
    /// # Errors
    /// If a listener cannot be bound.
    pub async fn start(upstreams: &[Upstream]) -> io::Result<Self> {
        let mut proxies = Vec::new();
        for upstream in upstreams {
            proxies.push((upstream.clone(), Proxy::start(upstream.clone()).await?));
        }
        Ok(Self(proxies))
    }

    /// Each upstream and the proxy to it.
    pub fn each(&self) -> impl Iterator<Item = (&Upstream, &Proxy)> {
        self.0.iter().map(|(u, p)| (u, p))
    }

    /// How many proxies: one per upstream.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The proxy to the `i`th upstream alone, as a group of one (for a
    /// fault on one node of a cluster).
    pub fn only(&self, i: usize) -> Proxies {
        Proxies(self.0.get(i).cloned().into_iter().collect())
    }

    /// The first proxy's port: the only one's, for a single server.
    pub fn port(&self) -> u16 {
        self.0.first().map_or(0, |(_, p)| p.port())
    }

    /// Connections accepted by all of them together.
    pub fn accepted(&self) -> u64 {
        self.0.iter().map(|(_, p)| p.accepted()).sum()
    }

    /// [`Proxy::blip`] of each.
    pub fn blip(&self, d: Duration) {
        self.0.iter().for_each(|(_, p)| p.blip(d));
    }

    /// [`Proxy::partition`] of each.
    pub fn partition(&self, d: Duration) {
        self.0.iter().for_each(|(_, p)| p.partition(d));
    }

    /// [`Proxy::cut`] of each.
    pub fn cut(&self) {
        self.0.iter().for_each(|(_, p)| p.cut());
    }

    /// [`Proxy::heal`] of each.
    pub fn heal(&self) {
        self.0.iter().for_each(|(_, p)| p.heal());
    }
}
