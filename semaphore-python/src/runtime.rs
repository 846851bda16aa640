//! The module's tokio runtime, and running a library call to its end from
//! a Python thread: with the GIL released while it waits, and Ctrl-C
//! (any Python signal handler that raises) interrupting it.

use std::future::Future;
use std::pin::pin;
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use pyo3::prelude::*;
use tokio::runtime::Runtime;

use crate::errors::to_py;
use crate::semaphore;

/// How often a blocking call takes the GIL back to run Python's signal
/// handlers (`KeyboardInterrupt` on Ctrl-C).
pub(crate) const SIGNAL_POLL: Duration = Duration::from_millis(50);

/// The runtime every store of the module runs on: made on first use in
/// each process, two worker threads (the stores' background tasks and the
/// asyncio calls), and shared with `pyo3-async-runtimes`. Never shut down:
/// the process's end ends it.
///
/// A child that `os.fork()` made gets a runtime of its own at its first
/// call: the parent's worker threads do not survive a fork, and a call on
/// its runtime would wait for a timer that no thread drives (a hang that
/// not even Ctrl-C ends). The parent's is left as it is (leaked, never
/// dropped: its threads are not the child's to join). A store made before
/// the fork still fails in the child, at its first call, with
/// `SemaphoreError` saying so (`Error::Forked`).
pub(crate) fn runtime() -> &'static Runtime {
    static RUNTIME: Mutex<Option<(u32, &'static Runtime)>> = Mutex::new(None);
    let me = std::process::id();
    let mut made = RUNTIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match *made {
        Some((pid, runtime)) if pid == me => runtime,
        _ => {
            let runtime: &'static Runtime = Box::leak(Box::new(
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .thread_name("semaphore-pool")
                    .enable_all()
                    .build()
                    .expect("starting the semaphore_pool runtime"),
            ));
            *made = Some((me, runtime));
            runtime
        }
    }
}

/// Makes [`runtime`] the one `pyo3-async-runtimes` spawns on; idempotent.
///
/// # Errors
/// `SemaphoreError` in a child that `os.fork()` made after the parent's
/// asyncio calls had started: `pyo3-async-runtimes` keeps the runtime it
/// was first given for the life of the process image, and that one's
/// threads are the parent's; an awaitable spawned there would never
/// finish. The sync calls work in such a child, on a store made there.
pub(crate) fn share_with_asyncio() -> PyResult<()> {
    // Already set (a second import in another interpreter): same runtime.
    let _ = pyo3_async_runtimes::tokio::init_with_runtime(runtime());
    if std::ptr::eq(pyo3_async_runtimes::tokio::get_runtime(), runtime()) {
        return Ok(());
    }
    Err(crate::errors::base_error(
        "the asyncio API of semaphore_pool cannot run in a child that os.fork() made after \
         the parent used it (the parent's runtime threads do not survive a fork): use the \
         sync API in the child, or start children with the 'spawn' or 'forkserver' method",
    ))
}

/// What a blocking call may be interrupted by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signals {
    /// Python's signal handlers run every [`SIGNAL_POLL`]; one that raises
    /// (Ctrl-C's `KeyboardInterrupt`) drops the call's future and raises.
    Checked,
    /// A short call that must not be left half done (a return): it runs
    /// to its end, and a signal is handled once it is back.
    Deferred,
}

/// Runs `call` to its end on the calling thread and converts its error.
///
/// With `inline` (a store that does no I/O: memory), `call` is first
/// polled once with the GIL held, which answers an uncontended call
/// without giving the GIL up. Otherwise, or if it must wait, the GIL is
/// released and `call` runs on [`runtime`] (the calling thread polls it,
/// so a SQLite statement runs here, not on another thread), in slices of
/// [`SIGNAL_POLL`] between which the signal handlers run
/// ([`Signals::Checked`]). An interrupted call's future is dropped inside
/// the runtime with the GIL released: a borrow then takes nothing.
pub(crate) fn wait<T, F>(py: Python<'_>, inline: bool, signals: Signals, call: F) -> PyResult<T>
where
    F: Future<Output = semaphore::Result<T>> + Send,
    T: Send,
{
    refuse_inside_runtime()?;
    // Pinned in place, not boxed: a borrow's future is large, and moving
    // it costs more than the rest of an uncontended pair. In an `Option`,
    // to drop it early where an interruption needs it dropped.
    let mut call = pin!(Some(call));
    if inline {
        let _entered = runtime().enter();
        let mut cx = Context::from_waker(Waker::noop());
        if let Some(Poll::Ready(done)) = call.as_mut().as_pin_mut().map(|c| c.poll(&mut cx)) {
            return done.map_err(|e| to_py(py, e));
        }
    }
    loop {
        let slice = py.detach(|| {
            let call = call.as_mut().as_pin_mut()?;
            runtime().block_on(async {
                match signals {
                    Signals::Checked => tokio::time::timeout(SIGNAL_POLL, call).await.ok(),
                    Signals::Deferred => Some(call.await),
                }
            })
        });
        if let Some(done) = slice {
            return done.map_err(|e| to_py(py, e));
        }
        if let Err(interrupted) = py.check_signals() {
            // Dropped inside the runtime, without the GIL: work it leaves
            // behind (a borrow's give-back) is spawned there.
            py.detach(|| {
                let _entered = runtime().enter();
                call.set(None);
            });
            return Err(interrupted);
        }
    }
}

/// A blocking call from a thread of the runtime itself (Python code run by
/// a finalizer there) would deadlock it: refused instead.
fn refuse_inside_runtime() -> PyResult<()> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(crate::errors::base_error(
            "a blocking semaphore_pool call was made on one of the module's own runtime threads; \
             call it from a Python thread, or await its _async form",
        ));
    }
    Ok(())
}
