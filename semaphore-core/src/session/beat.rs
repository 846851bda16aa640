//! The heartbeat loop of a [`Session`](super::Session): opening a
//! session, keeping it, and opening another when it is lost; and the
//! session ends the store reports ([`SessionEnds`]).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::{Now, SessionState, Shared};
use crate::clock::saturating_add;
use crate::detach::run_detached;
use crate::server_clock::DecidingClock;
use crate::{error::Result, id::SessionId};

/// The longest pause between two tries of a failing heartbeat.
const RETRY_MAX: Duration = Duration::from_millis(250);

/// The heartbeat loop: opens a session, keeps it, and opens another when
/// it is lost.
pub(super) async fn run(shared: Arc<Shared>) {
    let clock = shared.time.clock();
    // A fresh id not yet confirmed open, kept across the retries of its
    // first heartbeat (a retry after a lost answer finds it open).
    let mut opening: Option<SessionId> = None;
    let mut retry = Duration::ZERO;
    loop {
        let open = shared.now.borrow().open;
        let (id, end) = match open {
            Some((id, end)) => (id, Some(end)),
            None => (*opening.get_or_insert_with(SessionId::new), None),
        };
        let before = local_now(&shared.time);
        match beat_once(&shared, id, end).await {
            Beat::Kept(now) => {
                opening = None;
                retry = Duration::ZERO;
                if kept(&shared, id, end, now, before) {
                    pause(&shared, before).await;
                }
                continue;
            }
            Beat::Ended => {
                // The store ended it (or never had it): lost, and a new one
                // is opened at once.
                opening = None;
                match end {
                    Some(_) => end_on_store(&shared, id),
                    None => lose(&shared, None),
                }
                continue;
            }
            Beat::Failed => {}
        }
        // Failed, timed out, or its end passed meanwhile.
        if let Some(end) = end {
            if clock.now() >= end {
                lose(&shared, Some(id));
                retry = Duration::ZERO;
                continue;
            }
            shared.now.send_if_modified(|now| {
                let changed = now.state != SessionState::Suspended;
                now.state = SessionState::Suspended;
                changed
            });
        }
        if !retry.is_zero() {
            let wake = saturating_add(clock.now(), retry);
            match end {
                Some(end) => {
                    tokio::select! {
                        () = clock.sleep_until(wake) => {}
                        () = clock.sleep_until(end) => {}
                    }
                }
                None => clock.sleep_until(wake).await,
            }
        }
        retry = (retry * 2).clamp(Duration::from_millis(50), RETRY_MAX);
    }
}

/// What one heartbeat found ([`beat_once`]).
enum Beat {
    /// The store kept the session, at this reading of the server's clock.
    Kept(SystemTime),
    /// The store ended it, or never had it.
    Ended,
    /// It failed, timed out, or was answered after the session's end.
    Failed,
}

/// One heartbeat of session `id`, open until `end` (`None` while it is
/// being opened), within a third of the session's timeout, and given up
/// at `end`: a beat that lands after the session's end (by this process's
/// bound of the server's clock) cannot be trusted, since others may have
/// ended its leases before the server moved the end. A failure that no
/// retry can mend is kept for [`Session`](super::Session)'s reports.
async fn beat_once(shared: &Shared, id: SessionId, end: Option<SystemTime>) -> Beat {
    let clock = shared.time.clock();
    let beat = tokio::time::timeout(shared.timeout / 3, beat(shared, id, end.is_none()));
    let answer = match end {
        Some(end) => {
            tokio::select! {
                answer = beat => Some(answer),
                () = clock.sleep_until(end) => None,
            }
        }
        None => Some(beat.await),
    };
    let late = end.is_some_and(|end| clock.now() >= end);
    match answer {
        Some(Ok(Ok(Some(now)))) if !late => Beat::Kept(now),
        Some(Ok(Ok(None))) => Beat::Ended,
        Some(Ok(Err(e))) => {
            *shared.failed.lock() = (!e.is_retryable()).then(|| e.to_string());
            Beat::Failed
        }
        Some(Ok(Ok(Some(_))) | Err(_)) | None => Beat::Failed,
    }
}

/// The store kept session `id` (open until `end`, `None` if it was being
/// opened) at the server's `now`, by a beat sent at `before`: the view of
/// the server's clock learns from it, and the session is open until `now`
/// plus its timeout. `false` if the session was found ended meanwhile: it
/// stays ended, and the loop opens another at once.
fn kept(
    shared: &Shared,
    id: SessionId,
    end: Option<SystemTime>,
    now: SystemTime,
    before: SystemTime,
) -> bool {
    *shared.failed.lock() = None;
    if let Some(view) = shared.time.server() {
        view.observe(
            before,
            crate::clock::unix_ms(now) as i64,
            view.local().now(),
        );
    }
    let new_end = saturating_add(now, shared.timeout);
    let beating = end.is_some();
    shared.now.send_if_modified(|now| {
        if beating && now.open.is_none_or(|(open, _)| open != id) {
            return false;
        }
        *now = Now {
            open: Some((id, new_end)),
            state: SessionState::Connected,
        };
        true
    })
}

/// Sleeps until the next beat is due, `every` after the one sent at
/// `before`, or until woken (a session ended on the store).
async fn pause(shared: &Shared, before: SystemTime) {
    let clock = shared.time.clock();
    let every = Duration::from_micros(shared.every_us.load(std::sync::atomic::Ordering::Relaxed));
    let pause = every.saturating_sub(local_since(&shared.time, before));
    tokio::select! {
        () = clock.sleep_until(saturating_add(clock.now(), pause)) => {}
        () = shared.wake.notified() => {}
    }
}

/// A handle on a [`Session`](super::Session) that tells it of session ends
/// the store reports (from [`Session::ends`](super::Session::ends)); it does not keep the session alive.
#[derive(Debug, Clone)]
pub struct SessionEnds(pub(super) std::sync::Weak<Shared>);

impl SessionEnds {
    /// The store reports session `id` ended: its record was deleted or cut
    /// short by someone other than this holder, or the server lost it (an
    /// operator's act). If it is the open session it is lost at once,
    /// its holders' reason is
    /// [`Error::SessionEnded`](crate::Error::SessionEnded), and a new one
    /// is opened without waiting for the next heartbeat. Any other id is
    /// ignored.
    pub fn ended_on_store(&self, id: SessionId) {
        if let Some(shared) = self.0.upgrade() {
            end_on_store(&shared, id);
        }
    }
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

/// Marks the open session `id` lost, ended by the store, and wakes the
/// heartbeat loop to open another.
pub(super) fn end_on_store(shared: &Shared, id: SessionId) {
    let lost = shared.now.send_if_modified(|now| {
        if now.open.is_some_and(|(open, _)| open == id) {
            now.open = None;
            now.state = SessionState::Lost;
            return true;
        }
        false
    });
    if lost {
        *shared.ended_by_store.lock() = Some(id);
        shared.wake.notify_one();
    }
}

/// One heartbeat of session `id` (see [`Heartbeat::beat`]).
async fn beat(shared: &Shared, id: SessionId, open: bool) -> Result<Option<SystemTime>> {
    #[cfg(feature = "fault-mutants")]
    {
        use crate::mutant::{Mutant, planted};
        if !open && planted(Mutant::HeartbeatSilent) {
            return Ok(Some(shared.time.clock().now()));
        }
        if planted(Mutant::SessionEarly) {
            let early = shared.timeout.saturating_sub(Duration::from_secs(1));
            return shared.heartbeat.beat(id, early, open).await;
        }
    }
    shared.heartbeat.beat(id, shared.timeout, open).await
}

/// Marks the open session lost; `close` names one to end on the store too
/// (its end passed here, but a heartbeat may have landed there).
pub(super) fn lose(shared: &Shared, close: Option<SessionId>) {
    shared.now.send_replace(Now {
        open: None,
        state: SessionState::Lost,
    });
    if let Some(id) = close {
        let heartbeat = shared.heartbeat.clone();
        run_detached(Box::pin(async move {
            let _ = heartbeat.close(id).await;
        }));
    }
}

/// `d` in whole microseconds.
pub(super) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// A reading of the clock that the view of the server's clock is made of
/// (the test's clock in test mode).
fn local_now(time: &DecidingClock) -> SystemTime {
    match time.server() {
        Some(view) => view.local().now(),
        None => time.clock().now(),
    }
}

/// Time on that clock since `before`.
fn local_since(time: &DecidingClock, before: SystemTime) -> Duration {
    local_now(time)
        .duration_since(before)
        .unwrap_or(Duration::ZERO)
}
