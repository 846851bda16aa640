//! The checker: a pure function from the logs of a run (every holder's
//! events and the nemesis's faults) to a [`Report`].
//!
//! A lease is named by its holder's pid and its token. Its *act interval*
//! on a position runs from its first `act` to its last. The invariants:
//!
//! - **(a) no overlap.** On each position, no two act intervals of
//!   different leases overlap: two holders never act on one slot at once
//!   (and, from the holders' side, that a holder knows first).
//! - **(b) tokens grow.** On each position, leases act in token order: a
//!   lease never acts after a lease with a greater token acted
//!   (fencing: a stale holder never acts after a newer one).
//! - **(c) the holder knows first.** Let N be the lease with a
//!   greater token on one of lease L's positions whose grant was received
//!   first, at `g`. Then L never acts at or after `g` (`acted after next
//!   grant`: whatever its process went through); and unless L's holder
//!   released it before `g`, the holder was told (`is_held()` said `false`,
//!   or `lost()` resolved; for a holder that watches `lost()`, only
//!   `lost()` counts) by `g`, give or take `told_slack` (the holders look
//!   every 2-5 ms), unless its process was stopped or dead around `g` (the
//!   faults log says when; `told late`).
//! - **(d) tokens are unique.** No token is granted twice.

mod downtime;
mod report;
#[cfg(test)]
mod tests;
mod text;

use std::collections::{BTreeMap, HashMap};

use crate::event::{Event, FaultRecord, Phase, Via, Watch};
use downtime::Downtime;
pub use report::{LeaseRef, RECENT, Report, Violation};
use text::context;

/// What the checker reads.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// Every holder's events, in any order.
    pub events: Vec<Event>,
    /// The nemesis's faults, in any order.
    pub faults: Vec<FaultRecord>,
    /// Log lines that did not parse (cut short by a kill).
    pub skipped_lines: usize,
}

/// How strict the checker is.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// How long after the next grant a holder's `told` may come, for the
    /// holder looks only every few milliseconds (ns).
    pub told_slack_ns: u64,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            told_slack_ns: 100_000_000,
        }
    }
}

#[derive(Debug, Default)]
struct Lease {
    pid: u32,
    token: u64,
    positions: Vec<u32>,
    granted: u64,
    acts: Vec<u64>,
    told: Option<(u64, Via)>,
    release: Option<u64>,
}

impl Lease {
    fn r(&self) -> LeaseRef {
        LeaseRef {
            pid: self.pid,
            token: self.token,
            positions: self.positions.clone(),
            granted: self.granted,
            first_act: self.acts.first().copied(),
            last_act: self.acts.last().copied(),
            told: self.told.map(|(t, _)| t),
            release: self.release,
        }
    }
}

/// Checks a history; see the module's docs for the invariants.
pub fn check(history: &History, options: &Options) -> Report {
    let mut report = Report {
        skipped_lines: history.skipped_lines,
        ..Report::default()
    };
    report.origin = history
        .events
        .iter()
        .map(Event::t)
        .chain(history.faults.iter().map(|f| f.t))
        .min()
        .unwrap_or(0);
    for f in &history.faults {
        if f.phase == Phase::Start {
            *report.faults.entry(f.kind.name()).or_insert(0) += 1;
        }
    }

    let mut events: Vec<&Event> = history.events.iter().collect();
    events.sort_by_key(|e| e.t());
    // How each holder process watches its leases: a `lost` holder must be
    // told by `lost()` itself (its `is_held()` checks guard its acts, but
    // would hide a late lost signal).
    let watching_lost: std::collections::HashSet<u32> = events
        .iter()
        .filter_map(|e| match e {
            Event::Start {
                pid,
                watch: Watch::Lost,
                ..
            } => Some(*pid),
            _ => None,
        })
        .collect();
    let mut leases: HashMap<(u32, u64), Lease> = HashMap::new();
    let mut pids = std::collections::HashSet::new();
    let mut duplicates = Vec::new();
    let mut by_token: HashMap<u64, u32> = HashMap::new();
    for e in events {
        pids.insert(e.pid());
        match e {
            Event::Grant {
                t,
                pid,
                token,
                positions,
                ..
            } => {
                report.grants += 1;
                if positions.len() > 1 {
                    report.multi_slot_grants += 1;
                }
                match by_token.get(token) {
                    Some(&first) => duplicates.push((first, *pid, *token)),
                    None => {
                        by_token.insert(*token, *pid);
                    }
                }
                leases.insert(
                    (*pid, *token),
                    Lease {
                        pid: *pid,
                        token: *token,
                        positions: positions.clone(),
                        granted: *t,
                        ..Lease::default()
                    },
                );
            }
            Event::Act { t, pid, token, .. } => {
                report.acts += 1;
                match leases.get_mut(&(*pid, *token)) {
                    Some(lease) => lease.acts.push(*t),
                    None => report.orphan_acts += 1,
                }
            }
            Event::Told {
                t, pid, token, via, ..
            } => {
                if *via != Via::Lost && watching_lost.contains(pid) {
                    continue;
                }
                if let Some(lease) = leases.get_mut(&(*pid, *token))
                    && lease.told.is_none()
                {
                    lease.told = Some((*t, *via));
                }
            }
            Event::Release { t, pid, token } => {
                report.releases += 1;
                if let Some(lease) = leases.get_mut(&(*pid, *token)) {
                    lease.release.get_or_insert(*t);
                }
            }
            Event::Released { outcome, .. } => {
                let key = match outcome.as_str() {
                    "true" | "false" => outcome.clone(),
                    o if o.starts_with("timeout") => "timeout".into(),
                    _ => "error".into(),
                };
                *report.released.entry(key).or_insert(0) += 1;
            }
            Event::Failed { op, error, .. } => {
                let key = if error.contains("exhausted") {
                    format!("{op} (exhausted)")
                } else {
                    op.clone()
                };
                *report.failed.entry(key).or_insert(0) += 1;
            }
            Event::Start { .. } | Event::Hold { .. } | Event::Exit { .. } => {}
        }
    }
    report.processes = pids.len();
    for lease in leases.values() {
        if let Some((_, via)) = lease.told {
            let name = match via {
                Via::IsHeld => "is_held",
                Via::Lost => "lost",
            };
            *report.told.entry(name).or_insert(0) += 1;
        }
    }
    for (first, second, token) in duplicates {
        report.violations.push(Violation::DuplicateToken {
            a: leases[&(first, token)].r(),
            b: leases[&(second, token)].r(),
        });
    }

    // The leases of each position, in token order.
    let mut by_position: BTreeMap<u32, Vec<&Lease>> = BTreeMap::new();
    for lease in leases.values() {
        for &p in &lease.positions {
            by_position.entry(p).or_default().push(lease);
        }
    }
    for list in by_position.values_mut() {
        list.sort_by_key(|l| (l.token, l.pid));
    }

    for (&position, list) in &by_position {
        // (a) and (b): act intervals in order of their first act.
        let mut acting: Vec<&&Lease> = list.iter().filter(|l| !l.acts.is_empty()).collect();
        acting.sort_by_key(|l| (l.acts[0], l.token));
        let mut longest: Option<&Lease> = None;
        let mut newest: Option<&Lease> = None;
        for &&lease in &acting {
            let first = lease.acts[0];
            if let Some(a) = longest
                && first <= *a.acts.last().unwrap_or(&0)
            {
                report.violations.push(Violation::Overlap {
                    position,
                    a: a.r(),
                    b: lease.r(),
                });
            }
            if let Some(n) = newest
                && lease.token < n.token
                && first > *n.acts.last().unwrap_or(&0)
            {
                report.violations.push(Violation::TokenOrder {
                    position,
                    newer: n.r(),
                    older: lease.r(),
                });
            }
            if longest.is_none_or(|a| lease.acts.last() > a.acts.last()) {
                longest = Some(lease);
            }
            if newest.is_none_or(|n| lease.token > n.token) {
                newest = Some(lease);
            }
        }
    }

    // (c): for each position, the earliest-received grant among the leases
    // from each index on (in token order).
    let mut earliest_after: BTreeMap<u32, Vec<Option<&Lease>>> = BTreeMap::new();
    for (&position, list) in &by_position {
        let mut suffix: Vec<Option<&Lease>> = vec![None; list.len() + 1];
        for i in (0..list.len()).rev() {
            suffix[i] = match suffix[i + 1] {
                Some(best) if best.granted <= list[i].granted => Some(best),
                _ => Some(list[i]),
            };
        }
        earliest_after.insert(position, suffix);
    }
    let downtime = Downtime::of(history);
    let slack = options.told_slack_ns;
    let mut ordered: Vec<&Lease> = leases.values().collect();
    ordered.sort_by_key(|l| (l.granted, l.pid));
    for lease in ordered {
        let mut next: Option<&Lease> = None;
        for p in &lease.positions {
            let list = &by_position[p];
            let i = list.partition_point(|l| l.token <= lease.token);
            if let Some(candidate) = earliest_after[p][i]
                && next.is_none_or(|n| candidate.granted < n.granted)
            {
                next = Some(candidate);
            }
        }
        let Some(next) = next else { continue };
        let g = next.granted;
        let released_first = lease.release.is_some_and(|r| r <= g);
        let from = g.max(lease.granted);
        let down = downtime.down_during(
            lease.pid,
            from.saturating_sub(slack),
            from.saturating_add(slack),
        );
        if !released_first {
            report.taken_over += 1;
            if !down {
                report.running_takeovers += 1;
            }
        }
        if let Some(&act) = lease.acts.iter().find(|&&t| t >= g) {
            report.violations.push(Violation::ActedAfterNextGrant {
                lease: lease.r(),
                next: next.r(),
                act,
            });
            continue;
        }
        if released_first {
            continue;
        }
        if lease
            .told
            .is_some_and(|(t, _)| t <= from.saturating_add(slack))
        {
            continue;
        }
        if down {
            report.excused += 1;
            continue;
        }
        report.violations.push(Violation::ToldLate {
            lease: lease.r(),
            next: next.r(),
        });
    }
    report.violations.sort_by_key(Violation::t);
    report.context = report
        .violations
        .iter()
        .map(|v| context(history, v, report.origin))
        .collect();
    report
}
