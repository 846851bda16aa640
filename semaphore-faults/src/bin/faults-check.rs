//! Runs the checker again over a run's directory of logs (kept when a
//! run fails, or with `SEMAPHORE_FAULTS_KEEP=1`) and prints its summary.
//!
//! ```text
//! faults-check DIR [TOLD_SLACK_MS]
//! ```
//!
//! Exits 1 if there are violations.

use std::path::PathBuf;

use semaphore_faults::check::{Options, check};
use semaphore_faults::run::read_history;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(dir) = args.next().map(PathBuf::from) else {
        eprintln!("usage: faults-check DIR [TOLD_SLACK_MS]");
        std::process::exit(64)
    };
    let slack_ms: u64 = args.next().map_or(100, |s| {
        s.parse().unwrap_or_else(|_| {
            eprintln!("faults-check: TOLD_SLACK_MS takes a number");
            std::process::exit(64)
        })
    });
    let history = read_history(&dir);
    if history.events.is_empty() {
        eprintln!("faults-check: no holder log in {}", dir.display());
        std::process::exit(66)
    }
    let report = check(
        &history,
        &Options {
            told_slack_ns: slack_ms * 1_000_000,
        },
    );
    print!("{report}");
    std::process::exit(i32::from(!report.violations.is_empty()));
}
