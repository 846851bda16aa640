//! [`Held`]: a guard of the library (a lease's, a lease set's) kept by a
//! Python object, reachable from blocking calls on any Python thread and
//! from asyncio calls running on the module's runtime.

use std::sync::Arc;

use pyo3::prelude::*;
use tokio::sync::Mutex;

use crate::runtime::runtime;

/// The cell a guard lives in: `None` once it has been released or
/// forgotten. An asyncio call holds the lock for as long as it runs (a
/// renewal), so the cell is tokio's mutex.
pub(crate) type Cell<T> = Arc<Mutex<Option<T>>>;

/// A guard kept by a Python object. Dropping the last handle on a guard
/// still held drops it inside the module's runtime with the GIL released:
/// the library then returns the lease at once.
pub(crate) struct Held<T: Send + 'static> {
    cell: Cell<T>,
    /// Whether the store answers without I/O (memory): a guard is then
    /// dropped in place.
    pub(crate) inline: bool,
}

impl<T: Send + 'static> Held<T> {
    pub(crate) fn new(value: T, inline: bool) -> Self {
        Self {
            cell: Arc::new(Mutex::new(Some(value))),
            inline,
        }
    }

    /// A handle on the cell, for a call that runs on the runtime.
    pub(crate) fn cell(&self) -> Cell<T> {
        self.cell.clone()
    }

    /// Runs `f` on the cell from a Python thread. If a call holds it (a
    /// renewal or a return in flight in another thread or task), waits for
    /// that call with the GIL released.
    pub(crate) fn with<R>(&self, py: Python<'_>, f: impl FnOnce(&mut Option<T>) -> R) -> R {
        loop {
            if let Ok(mut slot) = self.cell.try_lock() {
                return f(&mut slot);
            }
            let cell = self.cell.clone();
            py.detach(move || {
                if tokio::runtime::Handle::try_current().is_ok() {
                    // A thread of the runtime (a finalizer run there) must
                    // not block on it.
                    std::thread::yield_now();
                } else {
                    drop(cell.blocking_lock());
                }
            });
        }
    }
}

impl<T: Send + 'static> Drop for Held<T> {
    fn drop(&mut self) {
        let Some(cell) = Arc::get_mut(&mut self.cell) else {
            return; // a call in flight holds the guard: it drops it last
        };
        let Some(guard) = cell.get_mut().take() else {
            return;
        };
        if self.inline {
            return drop(guard);
        }
        let mut guard = Some(guard);
        let _ = Python::try_attach(|py| {
            py.detach(|| {
                let _entered = runtime().enter();
                drop(guard.take());
            })
        });
        // Not attached to Python (a thread of the runtime), or Python is
        // shutting down.
        let _entered = runtime().enter();
        drop(guard);
    }
}
