use super::*;
use crate::event::FaultKind;

const SLACK: u64 = 5;

fn opts() -> Options {
    Options {
        told_slack_ns: SLACK,
    }
}

fn grant(t: u64, pid: u32, token: u64, positions: &[u32]) -> Event {
    Event::Grant {
        t,
        pid,
        asked: t.saturating_sub(1),
        token,
        positions: positions.to_vec(),
        lease: format!("l{token}"),
    }
}

fn acts(
    pid: u32,
    token: u64,
    positions: &[u32],
    times: impl IntoIterator<Item = u64>,
) -> Vec<Event> {
    times
        .into_iter()
        .map(|t| Event::Act {
            t,
            pid,
            token,
            positions: positions.to_vec(),
        })
        .collect()
}

fn told(t: u64, pid: u32, token: u64) -> Event {
    Event::Told {
        t,
        pid,
        token,
        via: Via::IsHeld,
        reason: None,
        clocks: None,
    }
}

fn release(t: u64, pid: u32, token: u64) -> Event {
    Event::Release { t, pid, token }
}

fn fault(t: u64, kind: FaultKind, phase: Phase, pid: u32) -> FaultRecord {
    FaultRecord {
        t,
        kind,
        phase,
        slot: Some(0),
        pid: Some(pid),
        detail: String::new(),
    }
}

fn run(events: Vec<Event>, faults: Vec<FaultRecord>) -> Report {
    check(
        &History {
            events,
            faults,
            skipped_lines: 0,
        },
        &opts(),
    )
}

fn kinds(r: &Report) -> Vec<&'static str> {
    r.violations.iter().map(Violation::kind).collect()
}

/// Two holders taking turns on position 0, each releasing before the
/// other's grant; a third on position 1 throughout.
fn clean() -> Vec<Event> {
    let mut e = vec![grant(10, 1, 1, &[0]), grant(11, 3, 2, &[1])];
    e.extend(acts(1, 1, &[0], (12..=30).step_by(3)));
    e.extend(acts(3, 2, &[1], (12..=90).step_by(3)));
    e.push(release(31, 1, 1));
    e.push(grant(33, 2, 3, &[0]));
    e.extend(acts(2, 3, &[0], (34..=60).step_by(2)));
    e.push(release(61, 2, 3));
    e.push(release(91, 3, 2));
    e.push(grant(92, 1, 4, &[0, 1]));
    e.extend(acts(1, 4, &[0, 1], [93, 95]));
    e.push(release(96, 1, 4));
    e
}

#[test]
fn a_clean_history_has_no_violation() {
    let r = run(clean(), vec![]);
    assert!(r.violations.is_empty(), "{r}");
    assert_eq!(r.grants, 4);
    assert_eq!(r.multi_slot_grants, 1);
    assert_eq!(r.releases, 4);
    assert_eq!(r.taken_over, 0);
}

#[test]
fn a_lease_told_in_time_after_its_loss_is_fine() {
    let mut e = vec![grant(10, 1, 1, &[0])];
    e.extend(acts(1, 1, &[0], [12, 15, 18]));
    e.push(told(20, 1, 1));
    e.push(grant(21, 2, 2, &[0]));
    e.extend(acts(2, 2, &[0], [22, 25]));
    e.push(release(40, 1, 1));
    // Told within the slack after the next grant: the holder looks
    // only every few ms.
    e.push(grant(50, 3, 3, &[1]));
    e.push(grant(52, 1, 4, &[1]));
    e.push(told(55, 3, 3));
    let r = run(e, vec![]);
    assert!(r.violations.is_empty(), "{r}");
    assert_eq!(r.taken_over, 2);
    assert_eq!(r.told["is_held"], 2);
}

#[test]
fn overlapping_acts_are_reported() {
    let mut e = vec![grant(10, 1, 1, &[0]), grant(14, 2, 2, &[0])];
    e.extend(acts(1, 1, &[0], [11, 15, 20]));
    e.extend(acts(2, 2, &[0], [16, 25]));
    let r = run(e, vec![]);
    assert!(kinds(&r).contains(&"overlap"), "{r}");
    let Some(Violation::Overlap { position, a, b }) =
        r.violations.iter().find(|v| v.kind() == "overlap")
    else {
        unreachable!()
    };
    assert_eq!((*position, a.token, b.token), (0, 1, 2));
    // And lease 1 acted after lease 2's grant.
    assert!(kinds(&r).contains(&"acted after next grant"), "{r}");
}

#[test]
fn a_stale_holder_acting_after_a_newer_one_is_reported() {
    // Lease 1's holder stalls before its first act; lease 2 comes and
    // goes; then lease 1 acts.
    let mut e = vec![grant(10, 1, 1, &[0]), grant(20, 2, 2, &[0])];
    e.extend(acts(2, 2, &[0], [21, 25]));
    e.push(release(26, 2, 2));
    e.extend(acts(1, 1, &[0], [30, 33]));
    let r = run(e, vec![]);
    let k = kinds(&r);
    assert!(k.contains(&"token order"), "{r}");
    assert!(k.contains(&"acted after next grant"), "{r}");
    assert!(!k.contains(&"overlap"), "{r}");
}

#[test]
fn acting_between_the_next_grant_and_its_first_act_is_reported() {
    // No overlap of act intervals, yet lease 1 acted after lease 2 was
    // granted (it should have known).
    let mut e = vec![grant(10, 1, 1, &[0, 1]), grant(40, 2, 2, &[1])];
    e.extend(acts(1, 1, &[0, 1], [12, 30, 45]));
    e.extend(acts(2, 2, &[1], [60, 70]));
    let r = run(e, vec![]);
    assert_eq!(kinds(&r), vec!["acted after next grant"], "{r}");
    let Violation::ActedAfterNextGrant { lease, next, act } = &r.violations[0] else {
        unreachable!()
    };
    assert_eq!((lease.token, next.token, *act), (1, 2, 45));
    assert!(r.to_string().contains("acted after next grant"), "{r}");
}

#[test]
fn a_running_holder_told_late_is_reported() {
    let mut e = vec![grant(10, 1, 1, &[0])];
    e.extend(acts(1, 1, &[0], [12, 30]));
    e.push(grant(40, 2, 2, &[0]));
    e.extend(acts(2, 2, &[0], [41, 50]));
    e.push(told(200, 1, 1));
    e.push(release(210, 1, 1));
    let r = run(e.clone(), vec![]);
    assert_eq!(kinds(&r), vec!["told late"], "{r}");
    // Never told at all, released after the next grant: also late.
    e.retain(|ev| !matches!(ev, Event::Told { .. }));
    let r = run(e, vec![]);
    assert_eq!(kinds(&r), vec!["told late"], "{r}");
}

#[test]
fn a_stopped_or_killed_holder_is_excused_from_being_told_but_not_from_acting() {
    let mut e = vec![grant(10, 1, 1, &[0])];
    e.extend(acts(1, 1, &[0], [12, 30]));
    e.push(grant(40, 2, 2, &[0]));
    e.push(told(200, 1, 1));
    let stop = vec![
        fault(35, FaultKind::Stop, Phase::Start, 1),
        fault(190, FaultKind::Stop, Phase::End, 1),
    ];
    let r = run(e.clone(), stop.clone());
    assert!(r.violations.is_empty(), "{r}");
    assert_eq!((r.taken_over, r.excused), (1, 1));
    assert_eq!(r.faults["stop"], 1);

    // Resumed just before the next grant: within the slack, excused.
    let resumed = vec![
        fault(20, FaultKind::Stop, Phase::Start, 1),
        fault(38, FaultKind::Stop, Phase::End, 1),
    ];
    assert!(run(e.clone(), resumed).violations.is_empty());
    // Resumed well before it: it had time to look.
    let early = vec![
        fault(20, FaultKind::Stop, Phase::Start, 1),
        fault(31, FaultKind::Stop, Phase::End, 1),
    ];
    assert_eq!(kinds(&run(e.clone(), early)), vec!["told late"]);

    let killed = vec![fault(35, FaultKind::Kill, Phase::Start, 1)];
    let mut dead = e.clone();
    dead.retain(|ev| !matches!(ev, Event::Told { .. }));
    assert!(run(dead, killed).violations.is_empty());

    // Acting after the next grant is never excused, stopped or not.
    e.extend(acts(1, 1, &[0], [195]));
    let r = run(e, stop);
    assert_eq!(kinds(&r), vec!["acted after next grant"], "{r}");
}

#[test]
fn a_grant_received_after_the_next_one_counts_from_its_receipt() {
    // Lease 1's reply was delayed past its expiry; lease 2 was granted
    // (received) first. Its holder is told at its first look.
    let e = vec![
        grant(40, 2, 2, &[0]),
        grant(50, 1, 1, &[0]),
        told(52, 1, 1),
        release(53, 1, 1),
    ];
    assert!(run(e, vec![]).violations.is_empty());
    // Acting on it is a violation.
    let mut e = vec![grant(40, 2, 2, &[0]), grant(50, 1, 1, &[0])];
    e.extend(acts(1, 1, &[0], [51]));
    assert!(kinds(&run(e, vec![])).contains(&"acted after next grant"));
}

#[test]
fn violations_come_in_time_order_with_the_faults_before_them() {
    let mut e = vec![grant(10, 1, 1, &[0]), grant(20, 2, 2, &[0])];
    e.extend(acts(1, 1, &[0], [12, 25]));
    e.extend(acts(2, 2, &[0], [21, 30]));
    e.extend([grant(40, 3, 7, &[1]), grant(41, 4, 7, &[1])]);
    let f = vec![
        fault(15, FaultKind::Cut, Phase::Start, 1),
        fault(18, FaultKind::Cut, Phase::End, 1),
        fault(16, FaultKind::Stop, Phase::Start, 9),
    ];
    let r = run(e, f);
    let times: Vec<u64> = r.violations.iter().map(Violation::t).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    assert_eq!(r.context.len(), r.violations.len());
    let i = r
        .violations
        .iter()
        .position(|v| v.kind() == "overlap")
        .unwrap();
    assert!(r.context[i].starts_with("cut at"), "{}", r.context[i]);
    assert!(!r.context[i].contains("stop"), "{}", r.context[i]);
    assert!(r.to_string().contains("faults before it: cut at"), "{r}");
}

#[test]
fn a_token_granted_twice_is_reported() {
    let e = vec![
        grant(10, 1, 7, &[0]),
        release(20, 1, 7),
        grant(30, 2, 7, &[1]),
    ];
    let r = run(e, vec![]);
    assert_eq!(kinds(&r), vec!["duplicate token"], "{r}");
}

#[test]
fn the_summary_names_counts_and_violations() {
    let mut e = clean();
    e.push(Event::Failed {
        t: 5,
        pid: 1,
        op: "borrow".into(),
        error: "pool exhausted".into(),
    });
    let mut f = vec![
        fault(1, FaultKind::Blip, Phase::Start, 1),
        fault(2, FaultKind::Blip, Phase::End, 1),
    ];
    f.push(fault(3, FaultKind::Restart, Phase::Start, 1));
    let text = run(e, f).to_string();
    assert!(text.contains("grants 4"), "{text}");
    assert!(text.contains("faults: blip 1, restart 1"), "{text}");
    assert!(text.contains("borrow (exhausted) 1"), "{text}");
    assert!(text.contains("violations: 0 (none)"), "{text}");
}
