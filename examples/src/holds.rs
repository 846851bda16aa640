//! One line per hold: `position token start_us end_us`, times in unix
//! microseconds, taken after the grant and before the return, so each
//! recorded interval lies inside the real hold.

use std::fmt;
use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

/// One slot held by one process, as it logged it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold {
    /// The slot held.
    pub position: u32,
    /// The lease's fencing token.
    pub token: u64,
    /// Unix microseconds just after the grant.
    pub start_us: u64,
    /// Unix microseconds just before the return (or the lease's expiry, for
    /// a holder that was killed).
    pub end_us: u64,
}

/// Now, in unix microseconds.
pub fn unix_us() -> u64 {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl fmt::Display for Hold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} {}",
            self.position, self.token, self.start_us, self.end_us
        )
    }
}

impl FromStr for Hold {
    type Err = String;

    fn from_str(line: &str) -> Result<Self, String> {
        let fields: Vec<u64> = line
            .split_whitespace()
            .map(|f| f.parse::<u64>().map_err(|e| format!("{line:?}: {e}")))
            .collect::<Result<_, _>>()?;
        match fields[..] {
            [position, token, start_us, end_us] => Ok(Hold {
                position: u32::try_from(position).map_err(|e| e.to_string())?,
                token,
                start_us,
                end_us,
            }),
            _ => Err(format!("{line:?}: expected 4 fields")),
        }
    }
}

/// The most holds in progress at any one instant.
pub fn max_concurrency(holds: &[Hold]) -> usize {
    let mut events: Vec<(u64, i64)> = holds
        .iter()
        .flat_map(|h| [(h.start_us, 1), (h.end_us, -1)])
        .collect();
    // At equal times, ends first: the recorded intervals are inside the real
    // holds, so touching ends are not an overlap.
    events.sort_unstable();
    let (mut now, mut most) = (0i64, 0i64);
    for (_, delta) in events {
        now += delta;
        most = most.max(now);
    }
    most as usize
}

/// Pairs of holds of the same position whose recorded intervals overlap:
/// each one is two leases holding one slot at once (an over-issue).
pub fn shared_positions(holds: &[Hold]) -> Vec<(Hold, Hold)> {
    let mut sorted = holds.to_vec();
    sorted.sort_unstable_by_key(|h| (h.position, h.start_us));
    sorted
        .windows(2)
        .filter(|w| w[0].position == w[1].position && w[1].start_us < w[0].end_us)
        .map(|w| (w[0], w[1]))
        .collect()
}

/// Fencing tokens that more than one hold carries: each one is a token
/// granted twice (a broken fence).
pub fn duplicate_tokens(holds: &[Hold]) -> Vec<u64> {
    let mut tokens: Vec<u64> = holds.iter().map(|h| h.token).collect();
    tokens.sort_unstable();
    let mut twice: Vec<u64> = tokens
        .windows(2)
        .filter(|w| w[0] == w[1])
        .map(|w| w[0])
        .collect();
    twice.dedup();
    twice
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(position: u32, start_us: u64, end_us: u64) -> Hold {
        Hold {
            position,
            token: 0,
            start_us,
            end_us,
        }
    }

    #[test]
    fn concurrency_counts_overlaps_but_not_touching_ends() {
        assert_eq!(
            max_concurrency(&[h(0, 0, 10), h(1, 5, 15), h(2, 10, 20)]),
            2
        );
        assert_eq!(max_concurrency(&[h(0, 0, 10), h(0, 10, 20)]), 1);
        assert_eq!(max_concurrency(&[]), 0);
    }

    #[test]
    fn shared_positions_finds_only_same_slot_overlaps() {
        assert!(shared_positions(&[h(0, 0, 10), h(0, 10, 20), h(1, 5, 15)]).is_empty());
        assert_eq!(shared_positions(&[h(0, 0, 10), h(0, 9, 20)]).len(), 1);
    }

    #[test]
    fn line_round_trips_and_bad_lines_are_errors() {
        let hold = Hold {
            position: 2,
            token: 7,
            start_us: 100,
            end_us: 250,
        };
        assert_eq!(hold.to_string().parse::<Hold>(), Ok(hold));
        assert!("1 2 3".parse::<Hold>().is_err());
        assert!("a b c d".parse::<Hold>().is_err());
    }

    #[test]
    fn duplicate_tokens_names_each_token_held_twice_once() {
        let with = |token| Hold {
            token,
            ..h(0, 0, 1)
        };
        assert_eq!(
            duplicate_tokens(&[with(1), with(2), with(3)]),
            Vec::<u64>::new()
        );
        assert_eq!(
            duplicate_tokens(&[with(2), with(1), with(2), with(2)]),
            vec![2]
        );
    }
}
