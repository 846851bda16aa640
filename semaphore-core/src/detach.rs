//! Running clean-up that nobody awaits: a dropped borrow's
//! late grant, a dropped guard's return, a dropped head's place in a shared
//! queue.
//!
//! The work must finish whatever becomes of the caller's runtime, so it
//! never depends on that runtime staying up:
//!
//! 1. It is polled once in place, which finishes it outright for stores that
//!    do no I/O.
//! 2. Still pending inside a runtime, it is spawned there, wrapped so that a
//!    runtime shutting down before it finishes (dropping the task unpolled)
//!    hands it on instead of losing it.
//! 3. Outside any runtime, or handed on at shutdown, it runs on the library
//!    runtime: one worker thread per process, started the first time it is
//!    needed ([`library_runtime`]). A future moved there may await a
//!    blocking task of the dying runtime: tokio finishes blocking tasks that
//!    have started, and their `JoinHandle` wakes any runtime. But a timer
//!    or a connection of the dying runtime fails there (tokio panics on
//!    such a timer), so work that is safe to repeat (a return, a leave, a
//!    session's close) is handed on as a way to start it again
//!    ([`run_detached_again`]), and starts anew.
//!
//! Only when the process itself exits (or cannot start a thread) is such
//! work lost; the leases involved then free themselves at their ttl.
//!
//! Work whose loss would end a lease the caller keeps (a forgotten lease's
//! unbinding) or keep one its holder gave up (a session's
//! close) runs with [`run_detached_awaited`]: the caller's runtime, when
//! dropped (the end of a `#[tokio::main]`), waits for it, up to
//! [`EXIT_WAIT`], and a caller outside any runtime waits for it in place.

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll, Waker};

pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Runs `work` to completion without an owner (see the module docs).
pub(crate) fn run_detached(work: BoxFuture<()>) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => spawn_rescued(&runtime, work, None),
        // Not polled here: a store's future may need a runtime's reactor
        // even to start.
        Err(_) => rescue(work),
    }
}

/// What a rescue runs in place of work that its dying runtime has polled:
/// the same work, made again.
type Again = Box<dyn FnOnce() -> BoxFuture<()> + Send>;

/// [`run_detached`] for work that `make` can start again from the
/// beginning (a return, a leave, a session's close: each safe to repeat).
/// A rescue at its runtime's shutdown then runs it anew on the library
/// runtime instead of moving the half-run future there: a future that
/// polled a timer or a connection of the dying runtime panics or fails
/// when polled on another ("a Tokio context ... being shutdown").
pub(crate) fn run_detached_again(make: impl Fn() -> BoxFuture<()> + Send + Sync + 'static) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            let first = make();
            spawn_rescued(&runtime, first, Some(Box::new(move || make())));
        }
        Err(_) => rescue(make()),
    }
}

/// Polls `work` once in place and, if it is pending, spawns it on
/// `runtime`, rescued if that runtime drops it unfinished.
fn spawn_rescued(runtime: &tokio::runtime::Handle, work: BoxFuture<()>, again: Option<Again>) {
    let mut work = Rescued {
        work: Some(work),
        again,
    };
    let mut cx = Context::from_waker(Waker::noop());
    if Pin::new(&mut work).poll(&mut cx).is_pending() {
        drop(runtime.spawn(work));
    }
}

/// The longest the end of a runtime, or a caller outside any, waits for
/// work run with [`run_detached_awaited`].
pub(crate) const EXIT_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// [`run_detached`], but the current runtime's drop waits for `work` (up
/// to [`EXIT_WAIT`]: tokio's drop waits for the blocking tasks that have
/// started, and one waits for `work` here), and a caller outside any
/// runtime waits for it in place; so that `main` returning right after does
/// not lose it (see the module docs). A store call of `work` in flight
/// when the runtime drops may fail, as its connections close with the
/// runtime's tasks: `work` retries ([`retried`]).
pub(crate) fn run_detached_awaited(work: BoxFuture<()>) {
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let work: BoxFuture<()> = Box::pin(async move {
        work.await;
        drop(done);
    });
    awaited(finished, || run_detached(work));
}

/// [`run_detached_awaited`] for work that `make` can start again, rescued
/// as [`run_detached_again`]'s.
pub(crate) fn run_detached_awaited_again(make: impl Fn() -> BoxFuture<()> + Send + Sync + 'static) {
    let (done, finished) = std::sync::mpsc::channel::<()>();
    // Each start holds a sender; the channel closes once the last start
    // has ended and the maker is gone.
    let make = move || -> BoxFuture<()> {
        let (done, work) = (done.clone(), make());
        Box::pin(async move {
            work.await;
            drop(done);
        })
    };
    awaited(finished, || run_detached_again(make));
}

/// Runs `start`, then waits for `finished` to close, up to [`EXIT_WAIT`]:
/// at the current runtime's drop (a blocking task it waits for), or in
/// place outside any runtime.
fn awaited(finished: std::sync::mpsc::Receiver<()>, start: impl FnOnce()) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        drop(runtime.spawn_blocking(move || {
            let _ = finished.recv_timeout(EXIT_WAIT);
        }));
        start();
    } else {
        start();
        let _ = finished.recv_timeout(EXIT_WAIT);
    }
}

/// Runs `work` to its end before returning, for at most [`EXIT_WAIT`], if
/// it does not finish when polled once in place and the caller is on a
/// worker of a multi-thread runtime (the thread blocks in
/// [`tokio::task::block_in_place`], which moves its other tasks away);
/// otherwise (a current-thread runtime, a `LocalSet`, no runtime) as
/// [`run_detached_awaited`]. For work that must land before the caller's
/// `main` may return: that runtime's end cancels its tasks, and with them
/// the connections a store call in flight uses.
pub(crate) fn run_now_or_awaited(work: BoxFuture<()>) {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let mut work = work;
    let mut cx = Context::from_waker(Waker::noop());
    if work.as_mut().poll(&mut cx).is_ready() {
        return;
    }
    let runtime = match Handle::try_current() {
        Ok(runtime) if runtime.runtime_flavor() == RuntimeFlavor::MultiThread => runtime,
        _ => return run_detached_awaited(work),
    };
    // `block_in_place` refuses (panics before it runs anything) where it
    // cannot hand the worker's tasks on, as in a `LocalSet`: the work is
    // then still here, and runs in the background.
    let slot = std::sync::Mutex::new(Some(work));
    let blocked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        tokio::task::block_in_place(|| {
            let work = slot.lock().ok().and_then(|mut w| w.take());
            if let Some(work) = work {
                let deadline = exit_deadline();
                runtime.block_on(async move {
                    tokio::select! {
                        () = work => {}
                        () = deadline => {}
                    }
                });
            }
        });
    }));
    if blocked.is_err()
        && let Some(work) = slot.into_inner().ok().flatten()
    {
        run_detached_awaited(work);
    }
}

/// [`EXIT_WAIT`] from now, timed by the library's runtime if it can be
/// had: a guard may be dropped while its own runtime shuts down (its
/// tasks are dropped then), when that runtime's timer no longer runs and
/// a wait it timed would never end.
fn exit_deadline() -> tokio::time::Sleep {
    match library_runtime() {
        Some(library) => {
            let _entered = library.enter();
            tokio::time::sleep(EXIT_WAIT)
        }
        None => tokio::time::sleep(EXIT_WAIT),
    }
}

/// Runs `call` up to three times while it fails with a retryable storage
/// error (a connection that closed under it), without pausing: for the
/// work of [`run_detached_awaited`], whose caller's runtime may be ending.
pub(crate) async fn retried<T, F: Future<Output = crate::error::Result<T>>>(
    mut call: impl FnMut() -> F,
) -> crate::error::Result<T> {
    let mut tries = 1;
    loop {
        match call().await {
            Err(crate::error::Error::Storage {
                retryable: true, ..
            }) if tries < 3 => tries += 1,
            done => return done,
        }
    }
}

/// Spawns `work` on the current runtime, or else on the library's; its
/// abort handle, or `None` if no runtime could be had.
pub(crate) fn spawn(
    work: impl Future<Output = ()> + Send + 'static,
) -> Option<tokio::task::AbortHandle> {
    let handle = match tokio::runtime::Handle::try_current() {
        Ok(current) => current.spawn(work),
        Err(_) => library_runtime()?.spawn(work),
    };
    Some(handle.abort_handle())
}

/// Work that moves to the library runtime if dropped before it finished: by
/// a runtime shutting down with the task still pending. Work that can be
/// made again (`again`) is started anew there instead, the half-run future
/// dropped.
struct Rescued {
    work: Option<BoxFuture<()>>,
    again: Option<Again>,
}

impl Future for Rescued {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(work) = self.work.as_mut() else {
            return Poll::Ready(());
        };
        std::task::ready!(work.as_mut().poll(cx));
        self.work = None;
        Poll::Ready(())
    }
}

impl Drop for Rescued {
    fn drop(&mut self) {
        let Some(work) = self.work.take() else {
            return;
        };
        match self.again.take() {
            Some(again) => {
                drop(work);
                rescue(again());
            }
            None => rescue(work),
        }
    }
}

/// Runs `work` on the library runtime, starting it if need be.
fn rescue(work: BoxFuture<()>) {
    // With no runtime to run it on, the work is dropped: its leases free
    // themselves at their ttl.
    if let Some(runtime) = library_runtime() {
        drop(runtime.spawn(work));
    }
}

/// The library's own runtime: one worker thread, started the first time it
/// is needed, alive until the process exits. Rescued clean-up runs on it,
/// and the blocking API drives its calls with it.
pub(crate) fn library_runtime() -> Option<&'static tokio::runtime::Handle> {
    static RUNTIME: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("semaphore-runtime")
                .enable_all()
                .build()
                .ok()
        })
        .as_ref()
        .map(tokio::runtime::Runtime::handle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// A guard dropped while its runtime shuts down, whose return cannot
    /// finish (that runtime no longer drives it), holds the shutdown for
    /// [`EXIT_WAIT`] at most, not for ever.
    #[test]
    fn work_dropped_in_its_runtimes_shutdown_waits_a_bounded_time() {
        struct ReturnsOnDrop;
        impl Drop for ReturnsOnDrop {
            fn drop(&mut self) {
                run_now_or_awaited(Box::pin(std::future::pending::<()>()));
            }
        }
        let (started_tx, started_rx) = mpsc::channel();
        let (dropped_tx, dropped_rx) = mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            runtime.spawn(async move {
                let _guard = ReturnsOnDrop;
                let _ = started_tx.send(());
                std::future::pending::<()>().await;
            });
            started_rx.recv().unwrap();
            drop(runtime);
            let _ = dropped_tx.send(());
        });
        dropped_rx
            .recv_timeout(EXIT_WAIT * 10)
            .expect("the runtime's shutdown ended");
    }

    /// Work left pending on a runtime that is dropped still completes.
    #[test]
    fn work_pending_when_its_runtime_is_dropped_finishes_on_the_library_runtime() {
        let (gate_tx, gate_rx) = tokio::sync::oneshot::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            run_detached(Box::pin(async move {
                let _ = gate_rx.await;
                done_tx.send(()).unwrap();
            }));
        });
        drop(runtime);
        gate_tx.send(()).unwrap();
        done_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the work never finished");
    }

    /// Work that its runtime polled (a timer of that runtime registered)
    /// and then dropped unfinished is started again on the library
    /// runtime: moved there half-run, its timer would panic when polled.
    #[test]
    fn work_that_can_start_again_does_so_when_its_runtime_is_dropped() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        let (done_tx, done_rx) = mpsc::channel();
        let starts = Arc::new(AtomicUsize::new(0));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let counted = starts.clone();
        runtime.block_on(async move {
            run_detached_again(move || {
                let (starts, done) = (counted.clone(), done_tx.clone());
                Box::pin(async move {
                    starts.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    done.send(()).unwrap();
                })
            });
        });
        drop(runtime);
        done_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the work never finished");
        assert_eq!(starts.load(Ordering::SeqCst), 2, "started again, not moved");
    }

    /// Outside any runtime, work runs on the library runtime.
    #[test]
    fn work_detached_outside_a_runtime_finishes() {
        let (done_tx, done_rx) = mpsc::channel();
        run_detached(Box::pin(async move {
            tokio::task::yield_now().await;
            done_tx.send(()).unwrap();
        }));
        done_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the work never finished");
    }
}
