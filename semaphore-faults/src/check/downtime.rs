//! When each holder process was not running, from the faults log and the
//! holders' exits: a holder stopped or dead when the next lease was
//! granted is excused from being told (invariant (c)).

use std::collections::HashMap;

use super::History;
use crate::event::{Event, FaultKind, FaultRecord, Phase};

/// When each holder process was not running: stopped (from `SIGSTOP` to
/// `SIGCONT`) or dead (from `SIGKILL` or its own exit).
#[derive(Debug, Default)]
pub(super) struct Downtime {
    by_pid: HashMap<u32, Vec<(u64, u64)>>,
}

impl Downtime {
    pub(super) fn of(history: &History) -> Self {
        let mut d = Downtime::default();
        let mut faults: Vec<&FaultRecord> = history.faults.iter().collect();
        faults.sort_by_key(|f| f.t);
        let mut stopped: HashMap<u32, u64> = HashMap::new();
        for f in faults {
            let Some(pid) = f.pid else { continue };
            match (f.kind, f.phase) {
                (FaultKind::Stop, Phase::Start) => {
                    stopped.insert(pid, f.t);
                }
                (FaultKind::Stop, Phase::End) => {
                    let from = stopped.remove(&pid).unwrap_or(0);
                    d.add(pid, from, f.t);
                }
                (FaultKind::Kill, Phase::Start) => d.add(pid, f.t, u64::MAX),
                _ => {}
            }
        }
        for (pid, from) in stopped {
            d.add(pid, from, u64::MAX);
        }
        for e in &history.events {
            if let Event::Exit { t, pid } = e {
                d.add(*pid, *t, u64::MAX);
            }
        }
        d
    }

    fn add(&mut self, pid: u32, from: u64, to: u64) {
        self.by_pid.entry(pid).or_default().push((from, to));
    }

    /// Whether `pid` was stopped or dead at any time in `[from, to]`.
    pub(super) fn down_during(&self, pid: u32, from: u64, to: u64) -> bool {
        self.by_pid
            .get(&pid)
            .is_some_and(|spans| spans.iter().any(|&(s, e)| s <= to && e >= from))
    }
}
