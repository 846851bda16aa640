//! Sessions: what a networked store's bound
//! leases belong to, kept alive by a heartbeat, and how a holder knows,
//! without asking, that its session still vouches for them.
//!
//! The model is etcd's session (a lease with a TTL, kept alive in the
//! background, `Done()` when lost) and ZooKeeper's as Curator shows it
//! (connection states `CONNECTED`, `SUSPENDED`, `LOST`; the session outlives
//! a connection loss shorter than its timeout). A store that has sessions
//! keeps a record per session with an end on the deciding clock; a
//! heartbeat moves the end to the step's reading plus the timeout, and a
//! bound lease is active only while its session's end is in the future.
//! So a connection that drops and comes back within the timeout ends
//! nothing, and a process killed outright loses its bound leases once its
//! session's end passes.
//!
//! The holder's side is exact by construction: a successful heartbeat
//! answers the step's reading of the server's clock, so this process knows
//! the session's end on the server's time line, and the store's clock
//! ([`ServerClock`](crate::store::ServerClock)) never reads earlier than the
//! server's. [`Session::vouches`] compares the two without I/O; it turns
//! `false` no later than the server would let anyone else take a bound
//! lease.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use crate::detach::{run_detached_awaited_again, spawn};
use crate::server_clock::DecidingClock;
use crate::{error::Result, id::SessionId};

mod beat;
mod unconfirmed;
pub use beat::SessionEnds;
use beat::{micros, run};
pub use unconfirmed::Unconfirmed;

/// A session's state as its holder sees it, after Curator's connection
/// states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SessionState {
    /// A session is open and its last heartbeat landed.
    Connected,
    /// A session is open but its last heartbeat failed (the store cannot be
    /// reached, or did not answer in time): it still vouches for its leases
    /// until its end, and the store keeps trying. Curator's `SUSPENDED`: a
    /// cautious holder pauses here.
    Suspended,
    /// No session vouches for leases: the last one ended (its end passed
    /// before a heartbeat landed, or the store ended it), or none has been
    /// opened yet. Leases bound to an ended session are lost; a new session
    /// is being opened for the leases to come.
    Lost,
}

/// One step of a store's session record, the store's half of a session
/// (see [`Session::start`]).
///
/// # Contract
/// Each call is one atomic step on the store's deciding clock (rule
/// "Time"), like a [`Store`](crate::store::Store) primitive. An ended
/// session never lives again: a beat of a session whose end has passed, or
/// that was closed, changes nothing and answers `None`, so that no lease
/// bound to it becomes active again.
#[async_trait::async_trait]
pub trait Heartbeat: Send + Sync + fmt::Debug + 'static {
    /// Reads the deciding clock (`now`) and then: if session `id` lives
    /// (its end is after `now`), moves its end to `now + timeout` and
    /// answers `Some(now)`; if its record has ended, answers `None`; if
    /// the store keeps no record of `id` and `open` is set, creates it with
    /// its end at `now + timeout` and answers `Some(now)` (`open` is set
    /// only for a fresh id that no lease names yet, and for the retries of
    /// its first beat); with no record and `open` unset, answers `None`.
    async fn beat(
        &self,
        id: SessionId,
        timeout: Duration,
        open: bool,
    ) -> Result<Option<SystemTime>>;

    /// Ends session `id` at once, as its end passing would: every lease
    /// bound to it stops being active, and the waiters of their pools, in
    /// every process, are woken. Ending an ended or unknown session does
    /// nothing.
    async fn close(&self, id: SessionId) -> Result<()>;
}

/// What the session task last learned.
#[derive(Debug, Clone)]
pub(super) struct Now {
    /// The open session and its end on the deciding clock, as of its last
    /// heartbeat that landed.
    pub(super) open: Option<(SessionId, SystemTime)>,
    pub(super) state: SessionState,
}

/// A store handle's session: opened when the handle connects, heartbeated
/// every third of its timeout while the handle lives, and closed when the
/// handle is dropped. A networked store owns one and shows
/// it through [`Store::session`](crate::store::Store::session); bound
/// leases name the session open when they were borrowed.
///
/// Users read it to learn whether the store can still be reached
/// ([`state`](Session::state), [`changed`](Session::changed)); a
/// [`LeaseGuard`](crate::LeaseGuard) reads it for
/// [`is_held`](crate::LeaseGuard::is_held).
pub struct Session {
    shared: Arc<Shared>,
    task: Option<tokio::task::AbortHandle>,
    /// The process that started it: a forked child's copy closes nothing.
    process: crate::store::ForkCheck,
}

pub(super) struct Shared {
    pub(super) heartbeat: Arc<dyn Heartbeat>,
    pub(super) time: DecidingClock,
    pub(super) timeout: Duration,
    pub(super) now: watch::Sender<Now>,
    /// Wakes the heartbeat loop: the store found the session ended.
    pub(super) wake: tokio::sync::Notify,
    /// The last heartbeat's failure if retrying cannot mend it (a role
    /// without the right to write the sessions' table), until one lands.
    pub(super) failed: parking_lot::Mutex<Option<String>>,
    /// The last open session that the store ended (not its end passing
    /// here): an operator's act, told apart in the holders' reason.
    pub(super) ended_by_store: parking_lot::Mutex<Option<SessionId>>,
    /// How often heartbeats go, in µs: a third of the timeout unless
    /// [`Session::beat_every`] says more often.
    pub(super) every_us: std::sync::atomic::AtomicU64,
    /// Held (read) by each unbinding in flight ([`Session::unbinding`]);
    /// the close on drop waits for them (write): a lease forgotten just
    /// before the store handle was dropped must leave the session before
    /// the session's end ends it.
    pub(super) unbinding: Arc<tokio::sync::RwLock<()>>,
    /// The bounds of the handed leases not yet confirmed
    /// ([`Unconfirmed`]): the session vouches until the earliest at most.
    pub(super) caps: unconfirmed::Caps,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let now = self.shared.now.borrow();
        f.debug_struct("Session")
            .field("timeout", &self.shared.timeout)
            .field("open", &now.open)
            .field("state", &now.state)
            .finish()
    }
}

/// How long a session's close on drop waits for the unbindings in flight.
const UNBIND_WAIT: Duration = Duration::from_secs(2);

impl Session {
    /// Starts a session kept by `heartbeat`, with `timeout` (at least
    /// [`MIN_SESSION_TIMEOUT`](crate::store::MIN_SESSION_TIMEOUT); the
    /// store checks it), its heartbeats timed by `time`, whose view of the
    /// server's clock each heartbeat's answer refines. The first heartbeat
    /// is sent at once, on the current tokio runtime or else the library's;
    /// [`opened`](Session::opened) waits for it.
    ///
    /// Heartbeats go every `timeout / 3` (or [`beat_every`](Session::beat_every))
    /// after the last one was sent; one that fails or takes longer than
    /// `timeout / 3` is tried again at once
    /// and then every 50 ms, doubling to 250 ms. A session whose end passes
    /// before a heartbeat lands is lost for good: it is closed (best
    /// effort) and a new one opened.
    pub fn start(heartbeat: Arc<dyn Heartbeat>, timeout: Duration, time: DecidingClock) -> Self {
        let (now, _) = watch::channel(Now {
            open: None,
            state: SessionState::Lost,
        });
        let shared = Arc::new(Shared {
            heartbeat,
            time,
            timeout,
            now,
            wake: tokio::sync::Notify::new(),
            failed: parking_lot::Mutex::new(None),
            ended_by_store: parking_lot::Mutex::new(None),
            every_us: std::sync::atomic::AtomicU64::new(micros(timeout / 3)),
            unbinding: Arc::default(),
            caps: unconfirmed::Caps::default(),
        });
        let task = spawn(run(shared.clone()));
        Self {
            shared,
            task,
            process: crate::store::ForkCheck::here(),
        }
    }

    /// Waits up to `patience` for the first session to open; whether one
    /// is open.
    ///
    /// # Cancel safety
    /// Safe: it only watches the session's state.
    pub async fn opened(&self, patience: Duration) -> bool {
        let mut rx = self.shared.now.subscribe();
        let open = rx.wait_for(|now| now.open.is_some());
        matches!(tokio::time::timeout(patience, open).await, Ok(Ok(_)))
    }

    /// [`opened`](Session::opened), for a store's connect: `Ok` once a
    /// session is open, or still opening after `patience` (bound borrows
    /// retry until it is); the heartbeat's error if it failed in a way
    /// retrying will not mend, so that a store handle that could never bind
    /// a lease is refused at connect rather than granting unbound ones.
    ///
    /// # Errors
    /// [`Error::Storage`](crate::Error::Storage) (`operation` `session`,
    /// not retryable) with the heartbeat's error.
    ///
    /// # Cancel safety
    /// Safe: it only watches the session's state.
    pub async fn open_within(&self, patience: Duration) -> crate::error::Result<()> {
        if self.opened(patience).await {
            return Ok(());
        }
        match self.shared.failed.lock().clone() {
            Some(why) => Err(crate::error::Error::Storage {
                operation: "session",
                retryable: false,
                source: format!("cannot open a session on the store: {why}").into(),
            }),
            None => Ok(()),
        }
    }

    /// The session's timeout.
    pub fn timeout(&self) -> Duration {
        self.shared.timeout
    }

    /// Heartbeats every `every` from now on rather than every third of the
    /// timeout (sessions need that often or more): clamped to between
    /// 10 ms and a third of the timeout. A holder's local deadline
    /// runs from its session's last heartbeat that landed, so beating more
    /// often makes it lag the server's end by less, and an outage survives
    /// more of the timeout: `semaphore run` beats every second, so that an
    /// outage up to its session timeout less the command's `--kill-after`
    /// and a margin ends nothing. Each beat is one write on the store.
    pub fn beat_every(&self, every: Duration) {
        let every = every
            .max(Duration::from_millis(10))
            .min(self.shared.timeout / 3);
        let before = self
            .shared
            .every_us
            .swap(micros(every), std::sync::atomic::Ordering::Relaxed);
        if before != micros(every) {
            self.shared.wake.notify_one();
        }
    }

    /// The state of the handle's session now (Curator's connection states).
    pub fn state(&self) -> SessionState {
        self.shared.now.borrow().state
    }

    /// Resolves at the next change of [`state`](Session::state) (or of the
    /// open session's end), with the state then.
    ///
    /// # Cancel safety
    /// Safe: it only watches. Each call waits for a change after it
    /// starts; read [`state`](Session::state) for one that came between
    /// calls.
    pub async fn changed(&self) -> SessionState {
        let mut rx = self.shared.now.subscribe();
        let _ = rx.changed().await;
        rx.borrow().state
    }

    /// The session that new bound leases are bound to: the one open now,
    /// `None` while none is (such a lease is then left to its ttl).
    pub fn current(&self) -> Option<SessionId> {
        self.shared.now.borrow().open.map(|(id, _)| id)
    }

    /// Whether session `id` certainly still lives on the store, decided
    /// without I/O: it is the open session, and the store's clock,
    /// which never reads earlier than the deciding one, has not reached its
    /// end as of its last heartbeat that landed.
    pub fn vouches(&self, id: SessionId) -> bool {
        self.end_of(id)
            .is_some_and(|end| self.shared.time.clock().now() < end)
    }

    /// The end of session `id` on the deciding clock as of its last
    /// heartbeat that landed, or the bound of a handed lease of it not yet
    /// confirmed ([`SessionEnds::unconfirmed`]) if that is earlier;
    /// `None` if it is not the open session.
    pub fn end_of(&self, id: SessionId) -> Option<SystemTime> {
        self.shared.end_of(id)
    }

    /// Resolves once session `id` no longer vouches for its leases: its
    /// end passes by the store's clock before a heartbeat moves it, or it
    /// is replaced.
    ///
    /// # Cancel safety
    /// Safe: it only watches the session's state.
    pub async fn ended(&self, id: SessionId) {
        let mut rx = self.shared.now.subscribe();
        let clock = self.shared.time.clock();
        loop {
            rx.borrow_and_update();
            let Some(end) = self.shared.end_of(id) else {
                return;
            };
            if clock.now() >= end {
                return;
            }
            tokio::select! {
                () = clock.sleep_until(end) => {}
                changed = rx.changed() => if changed.is_err() { return },
            }
        }
    }

    /// Tells the session that the store found session `id` ended (a step
    /// named it and found its record gone: the server lost its data, or
    /// an operator deleted it). If it is the open one it is lost at once,
    /// and a new one is opened without waiting for the next heartbeat.
    pub fn ended_on_store(&self, id: SessionId) {
        self.ends().ended_on_store(id);
    }

    /// A handle that tells this session of ends the store reports, for the
    /// store's wake-up listener: a session ended by someone else reaches
    /// its holder in milliseconds ([`SessionEnds::ended_on_store`]). It
    /// does not keep the session alive.
    pub fn ends(&self) -> SessionEnds {
        SessionEnds(Arc::downgrade(&self.shared))
    }

    /// Whether the store ended session `id` while it was open here (an
    /// operator deleted or cut short its record, or the server lost it),
    /// rather than its end passing before a heartbeat landed: the holders'
    /// reason is then [`Error::SessionEnded`](crate::Error::SessionEnded).
    pub fn ended_by_store(&self, id: SessionId) -> bool {
        *self.shared.ended_by_store.lock() == Some(id)
    }

    /// The error of a borrow step that named session `id` and found it
    /// ended: retryable, once this session is told
    /// ([`ended_on_store`](Session::ended_on_store)), so that the core's
    /// next attempt names a new session.
    pub fn ended_error(&self, id: Option<SessionId>) -> crate::error::Error {
        if let Some(id) = id {
            self.ended_on_store(id);
        }
        crate::error::Error::Storage {
            operation: "borrow",
            retryable: true,
            source: "the store's session had ended (the server lost it or it was deleted); \
                     a new one is being opened"
                .into(),
        }
    }

    /// A hold on the session's close for an unbinding in flight: the
    /// session is not closed on drop until it is dropped (2 s at most).
    /// `None` once the close has begun.
    pub(crate) fn unbinding(&self) -> Option<tokio::sync::OwnedRwLockReadGuard<()>> {
        self.shared.unbinding.clone().try_read_owned().ok()
    }

    /// Stops heartbeating without closing the session, as a process killed
    /// outright would: the store ends it once its end passes. For tests.
    #[cfg(feature = "conformance")]
    pub fn abandon(&self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

impl Drop for Session {
    /// Closes the session (a clean end: its leases free at once). Not in a
    /// child that `fork()` made of the process that started it: the
    /// session is the parent's, which still holds its leases.
    fn drop(&mut self) {
        if self.process.check("close").is_err() {
            return;
        }
        if let Some(task) = self.task.take() {
            task.abort();
        }
        // A clean end: the session's leases free at once, not at its end.
        if let Some((id, _)) = self.shared.now.borrow().open {
            let heartbeat = self.shared.heartbeat.clone();
            let unbinding = self.shared.unbinding.clone();
            run_detached_awaited_again(move || {
                let (heartbeat, unbinding) = (heartbeat.clone(), unbinding.clone());
                Box::pin(async move {
                    // After the unbindings in flight, for a while at most.
                    let _ = tokio::time::timeout(UNBIND_WAIT, unbinding.write()).await;
                    let _ = crate::detach::retried(|| heartbeat.close(id)).await;
                })
            });
        }
    }
}
