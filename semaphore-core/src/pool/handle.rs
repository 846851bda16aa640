//! [`Pool`] as a handle: made on a store and a pool id, with an alias and
//! limits of its own, and what it is made of.

use std::sync::Arc;

use crate::telemetry::Name;
use crate::{id::PoolId, limits::Limits, pool::Pool, primitives::Store};

impl Pool {
    /// A handle on pool `id` of `store`, with [`Limits::default`]. Makes no
    /// call to the store: the pool exists once [`register`](Pool::register)
    /// has run, here or in any process sharing the store.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use semaphore_memory::{MemoryStore, Pool, PoolId};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), semaphore_memory::Error> {
    /// let store = Arc::new(MemoryStore::new());
    /// // Every handle that names "gpus", in any task, means the same pool.
    /// let pool = Pool::new(store, PoolId::from_name("gpus"));
    /// assert_eq!(pool.id(), PoolId::from_name("gpus"));
    /// # Ok(()) }
    /// ```
    pub fn new(store: Arc<dyn Store>, id: PoolId) -> Self {
        let limits = Limits::default().within(&*store);
        Self {
            store,
            id,
            limits,
            name: Name::hashed(id),
            bound: Default::default(),
        }
    }

    /// The same handle, named `alias` in traces and metrics (the `tracing`
    /// and `metrics` features) instead of by a hash of its id: a name for
    /// people, such as `"gpus"`. The id itself never appears there, since it
    /// may be a secret, unless it is made the alias. Changes nothing else.
    pub fn with_alias(mut self, alias: impl Into<Arc<str>>) -> Self {
        self.name = Name::alias(&alias.into());
        self
    }

    pub(crate) fn name(&self) -> &Name {
        &self.name
    }

    /// The same handle with other [`Limits`] for the calls made through
    /// it; a `max_ttl` above the store's own
    /// ([`Store::max_ttl`](crate::store::Store::max_ttl)) is lowered to it.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits.within(&*self.store);
        self
    }

    /// The pool's id.
    pub fn id(&self) -> PoolId {
        self.id
    }

    /// The limits this handle checks and clamps against: never a `max_ttl`
    /// above the store's own.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The store behind the handle.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }
}
