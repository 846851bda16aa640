//! When `semaphore run`'s command must be dead, and how often the guardian
//! hears of it.

use std::time::Duration;

use crate::cli::MIN_TTL;
use crate::exit::{Exit, code};

/// The default of `--kill-after`, shrunk to fit a short ttl unless given.
const KILL_AFTER: Duration = Duration::from_secs(5);

/// How often the guardian is told the lease's local deadline, at most.
const TELL_EVERY: Duration = Duration::from_secs(1);

/// The longest margin before the lease's local deadline.
const MARGIN: Duration = Duration::from_secs(1);

/// When the command must be dead and how the guardian is kept told, for a
/// lease of a ttl with (or without) a session timeout.
///
/// The longest outage of the store (unreachable, stopped, partitioned)
/// that ends nothing: the window (the shorter of the ttl and the session
/// timeout) less `kill_after`, less the margin, less two `tell`s (the lease
/// and the session are confirmed every `tell`, and the guardian hears of a
/// confirmation within one), less 0.5 s for the first confirmation after
/// the outage (the keep-alive's and heartbeat's retries, 250 ms apart at
/// most, and the reconnect, measured at 130-220 ms after a 5-18 s cut on
/// PostgreSQL, Redis and MySQL). With the defaults (30 s, 5 s, 1 s, 1 s):
/// 21.5 s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Timing {
    /// How long before the lease's local deadline the command must be
    /// dead: a tenth of the window, at most 1 s (for the time a deadline
    /// takes to reach the guardian, signals to be delivered, and the
    /// clocks' rates).
    pub(super) margin: Duration,
    /// How often the guardian is told the deadline.
    pub(super) tell: Duration,
    /// SIGTERM to SIGKILL (`--kill-after`).
    pub(super) kill_after: Duration,
}

impl Timing {
    /// The timing of a lease of `ttl` bound to a session of `session`
    /// (`None`: the store has none). The window is the shorter of the two:
    /// the lease's local deadline is its expiry or its session's end,
    /// whichever comes first. Renewed and heartbeated every `tell` (a
    /// quarter of two thirds of the window, at most 1 s), a healthy lease
    /// always has more than two thirds of the window left, and the
    /// guardian is told the deadline as often; SIGTERM
    /// goes `--kill-after` before the deadline less the margin, which a
    /// healthy lease never comes within two tellings of. The default
    /// `--kill-after` shrinks to fit; a value given that does not fit is a
    /// usage error, and so is a window that leaves no room at all.
    pub(super) fn of(
        ttl: Duration,
        session: Option<Duration>,
        asked: Option<Duration>,
    ) -> Result<Self, Exit> {
        let window = session.map_or(ttl, |s| s.min(ttl));
        let healthy = window * 2 / 3;
        let margin = (window / 10).min(MARGIN);
        let tell = (healthy / 4).clamp(Duration::from_millis(10), TELL_EVERY);
        let flags = match session {
            Some(session) => format!(
                "--ttl {} and --session-timeout {}",
                humantime::format_duration(ttl),
                humantime::format_duration(session)
            ),
            None => format!(
                "--ttl {} (this store has no session timeout)",
                humantime::format_duration(ttl)
            ),
        };
        let Some(room) = healthy
            .checked_sub(margin)
            .and_then(|room| room.checked_sub(tell * 2))
        else {
            return Err(Exit::new(
                code::USAGE,
                format!(
                    "with {flags}, no time is left to end the command before the lease's \
                     deadline: raise --ttl or --session-timeout (at least {} each)",
                    humantime::format_duration(MIN_TTL)
                ),
            ));
        };
        let kill_after = match asked {
            None => KILL_AFTER.min(room),
            Some(asked) if asked <= room => asked,
            Some(asked) => {
                return Err(Exit::new(
                    code::USAGE,
                    format!(
                        "--kill-after {} does not fit: with {flags}, SIGTERM would go while \
                         the lease is healthy; it must be at most {} ms \
                         (raise --ttl or --session-timeout, or lower --kill-after)",
                        humantime::format_duration(asked),
                        room.as_millis()
                    ),
                ));
            }
        };
        Ok(Self {
            margin,
            tell,
            kill_after,
        })
    }
}
