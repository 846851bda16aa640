//! What calls hand back as plain values: a pool's state, a lease's data
//! and an admin listing's holder.

use pyo3::prelude::*;

use crate::semaphore;
use crate::time::unix_seconds;

/// A pool as of one instant; never shows lease ids.
#[pyclass(module = "semaphore_pool", frozen, eq, get_all)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PoolState {
    /// The pool's id, a UUID string.
    id: String,
    /// Its number of slots.
    count: u32,
    /// Slots held by active leases (a lease of n slots counts n); may
    /// exceed `count` after the count was lowered.
    in_use: u32,
    /// `max(count - in_use, 0)`.
    available: u32,
    /// Whether the pool is draining: it grants nothing new.
    draining: bool,
}

#[pymethods]
impl PoolState {
    fn __repr__(&self) -> String {
        format!(
            "PoolState(id='{}', count={}, in_use={}, available={}, draining={})",
            self.id,
            self.count,
            self.in_use,
            self.available,
            if self.draining { "True" } else { "False" }
        )
    }
}

impl From<semaphore::PoolState> for PoolState {
    fn from(state: semaphore::PoolState) -> Self {
        Self {
            id: state.id.to_string(),
            count: state.count,
            in_use: state.in_use,
            available: state.available,
            draining: state.draining,
        }
    }
}

/// A lease's data: what a borrow granted, without the power to return it
/// on its own (see `Pool.return_lease` for that).
#[pyclass(module = "semaphore_pool", frozen, eq, get_all)]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LeaseInfo {
    /// The lease's id, a UUID string: the credential that returns it.
    id: String,
    /// The pool's id, a UUID string.
    pool: String,
    /// The lowest of `positions`: the slot's number for a lease of one.
    position: u32,
    /// Every position the lease holds, lowest first.
    positions: Vec<u32>,
    /// The fencing token: above every token granted before on its
    /// positions.
    token: u64,
    /// When the lease frees itself, in unix seconds (to the millisecond).
    expires_at: f64,
}

#[pymethods]
impl LeaseInfo {
    /// The number of slots the lease holds.
    #[getter]
    fn slots(&self) -> usize {
        self.positions.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "LeaseInfo(position={}, token={}, positions={:?}, expires_at={:.3}, id='{}')",
            self.position, self.token, self.positions, self.expires_at, self.id
        )
    }
}

impl From<&semaphore::Lease> for LeaseInfo {
    fn from(lease: &semaphore::Lease) -> Self {
        Self {
            id: lease.id.to_string(),
            pool: lease.pool.to_string(),
            position: lease.position,
            positions: lease.positions.iter().copied().collect(),
            token: lease.token,
            expires_at: unix_seconds(lease.expires_at),
        }
    }
}

/// One active lease as `Pool.holders()` lists it: the lease, id included,
/// and the labels it was borrowed with.
#[pyclass(module = "semaphore_pool", frozen)]
#[derive(Debug, Clone)]
pub(crate) struct Holder {
    lease: LeaseInfo,
    owner: Option<String>,
    key: Option<String>,
}

#[pymethods]
impl Holder {
    /// The lease held.
    #[getter]
    fn lease(&self) -> LeaseInfo {
        self.lease.clone()
    }

    /// The owner label given at borrow, if any.
    #[getter]
    fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    /// The idempotency key given at borrow, if any.
    #[getter]
    fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// The lease's lowest position.
    #[getter]
    fn position(&self) -> u32 {
        self.lease.position
    }

    /// The lease's fencing token.
    #[getter]
    fn token(&self) -> u64 {
        self.lease.token
    }

    fn __repr__(&self) -> String {
        format!(
            "Holder(position={}, token={}, owner={:?}, key={:?})",
            self.lease.position, self.lease.token, self.owner, self.key
        )
    }
}

impl From<semaphore::Holder> for Holder {
    fn from(holder: semaphore::Holder) -> Self {
        Self {
            lease: LeaseInfo::from(&holder.lease),
            owner: holder.owner,
            key: holder.key,
        }
    }
}
