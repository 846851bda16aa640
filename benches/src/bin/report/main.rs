//! Prints BENCHMARKS.md's table from the estimates of the last
//! `cargo bench -p semaphore-benches` run: each line's figure, its anchor
//! measured in the same run, the ratio, the goal, and met / not met.
//!
//! Run: `cargo run -p semaphore-benches --bin report`

use std::path::PathBuf;

mod many;

/// How a line's ratio is formed and judged.
enum Goal {
    /// ours / anchor time, at most this.
    TimeAtMost(f64),
    /// anchor / ours time (throughput ratio), at least this.
    ThroughputAtLeast(f64),
    /// No goal: the figure is for users to choose by.
    None,
}

struct Line {
    name: &'static str,
    group: &'static str,
    anchor: &'static str,
    ours: &'static str,
    goal: Goal,
}

const LINES: &[Line] = &[
    Line {
        name: "1. memory, uncontended borrow+return vs tokio Semaphore",
        group: "1_uncontended_pair",
        anchor: "anchor_tokio",
        ours: "memory_pool",
        goal: Goal::TimeAtMost(3.0),
    },
    Line {
        name: "2. memory, 64 tasks on 4 slots, throughput vs tokio",
        group: "2_contended_64_tasks_4_slots",
        anchor: "anchor_tokio",
        ours: "memory_pool",
        goal: Goal::ThroughputAtLeast(1.0),
    },
    Line {
        name: "2b. memory, 2 threads on 2 pools of one store vs 2 tokio semaphores",
        group: "2b_two_pools_two_threads",
        anchor: "anchor_tokio",
        ours: "memory_store",
        goal: Goal::ThroughputAtLeast(0.5),
    },
    Line {
        name: "2c. memory, 10,000 waiters served by 10,000 returns, per hand-off",
        group: "2c_10000_waiters",
        anchor: "anchor_tokio",
        ours: "memory_pool",
        goal: Goal::TimeAtMost(3.0),
    },
    Line {
        name: "3. SQLite pair rate vs raw ceiling (NORMAL)",
        group: "3_sqlite_pair_normal",
        anchor: "anchor_raw_pair",
        ours: "sqlite_pool_pair",
        goal: Goal::ThroughputAtLeast(0.70),
    },
    Line {
        name: "6a. SQLite, count 1000 with 999 held vs count 4",
        group: "6a_sqlite_count_1000_999_held",
        anchor: "anchor_count_4",
        ours: "count_1000_999_held",
        goal: Goal::TimeAtMost(1.5),
    },
    Line {
        name: "6b. SQLite, 100,000 pools in the file vs 1",
        group: "6b_sqlite_100k_pools",
        anchor: "anchor_1_pool",
        ours: "100k_pools",
        goal: Goal::TimeAtMost(1.5),
    },
    Line {
        name: "7. SQLite pair rate vs raw ceiling (FULL)",
        group: "7_sqlite_pair_full",
        anchor: "anchor_raw_pair",
        ours: "sqlite_pool_pair",
        goal: Goal::None,
    },
    Line {
        name: "8. PostgreSQL pair rate vs two one-row UPDATEs",
        group: "postgres_pairs",
        anchor: "anchor_raw_pair",
        ours: "postgres_pool_pair",
        goal: Goal::ThroughputAtLeast(0.8),
    },
    Line {
        name: "9. PostgreSQL count-1 pool vs pg_advisory_xact_lock mutex",
        group: "postgres_mutex",
        anchor: "anchor_advisory_xact_lock",
        ours: "postgres_pool_count_1",
        goal: Goal::ThroughputAtLeast(1.0),
    },
    Line {
        name: "9b. PostgreSQL count-1 pool in the caller's transaction (borrow_in, return_in) vs pg_advisory_xact_lock mutex",
        group: "postgres_mutex",
        anchor: "anchor_advisory_xact_lock",
        ours: "postgres_pool_count_1_in_tx",
        goal: Goal::None,
    },
    Line {
        name: "14. Redis pair vs two calls of a do-nothing script (one INCR)",
        group: "redis_pairs",
        anchor: "anchor_incr_script_pair",
        ours: "redis_pool_pair",
        goal: Goal::ThroughputAtLeast(0.5),
    },
    Line {
        name: "17. MySQL pair vs two one-row UPDATEs (MariaDB, durable commits)",
        group: "mysql_pairs",
        anchor: "anchor_two_updates",
        ours: "mysql_pool_pair",
        goal: Goal::ThroughputAtLeast(0.5),
    },
];

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

fn criterion_dir() -> PathBuf {
    target_dir().join("criterion")
}

/// The figures an own-harness bench wrote for `line`.
fn processes(line: u32) -> Option<serde_json::Value> {
    let path = target_dir().join(format!("semaphore-bench/line{line}.json"));
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

fn judged(met: bool) -> &'static str {
    if met { "met" } else { "not met" }
}

/// The lines of the own-harness benches: percentiles and rates.
fn print_processes() {
    match processes(4) {
        Some(v) => {
            let (one, two) = (
                v["one_process_pairs_per_s"].as_f64().unwrap_or(0.0),
                v["two_processes_pairs_per_s"].as_f64().unwrap_or(0.0),
            );
            let ratio = two / one.max(1.0);
            println!(
                "| 4. SQLite, 2 processes: total pairs/s vs 1 process | {two:.0}/s | {one:.0}/s | {ratio:.2}x | >= 1x | {} |",
                judged(ratio >= 1.0)
            );
            for (key, label, goal_us) in [
                ("p50_us", "p50", None),
                ("p99_us", "p99", None),
                ("p999_us", "p99.9", Some(5_000.0)),
                ("max_us", "max", Some(50_000.0)),
            ] {
                let us = v[key].as_f64().unwrap_or(f64::NAN);
                let (goal, met) = match goal_us {
                    Some(g) => (format!("<= {} ms", g / 1000.0), judged(us <= g)),
                    None => ("none".to_string(), "-"),
                };
                println!(
                    "| 4. SQLite, 2 processes: borrow latency {label} | {} | | | {goal} | {met} |",
                    time(us * 1e3)
                );
            }
        }
        None => println!("| 4. SQLite, 2 processes | not run | | | | |"),
    }
    print_wake(5, "", (100.0, 1_000.0));
    print_wake(10, "PostgreSQL ", (500.0, 5_000.0));
    print_wake(16, "Redis ", (300.0, 2_000.0));
    print_line13();
    print_hot(
        15,
        "Redis hot pool (count 8, 16 tasks in 4 processes) vs do-nothing script pairs",
        "anchor_pairs_per_s",
    );
    if let Some(v) = processes(15) {
        let at = |key: &str| v[key].as_f64().unwrap_or(f64::NAN);
        for (tasks, ours, peer) in [
            ("1 task", "pairs_per_s_1_task", "peer_pairs_per_s_1_task"),
            ("16 tasks in 4 processes", "pairs_per_s", "peer_pairs_per_s"),
            (
                "64 tasks in 4 processes",
                "pairs_per_s_64_tasks",
                "peer_pairs_per_s_64_tasks",
            ),
        ] {
            let (ours, peer) = (at(ours), at(peer));
            let ratio = ours / peer;
            println!(
                "| 15. Redis hot pool, {tasks} vs npm redis-semaphore | {ours:.0}/s | {peer:.0}/s | {ratio:.2}x | > 1x | {} |",
                judged(ratio > 1.0)
            );
        }
        let (ours, anchor) = (
            at("pairs_per_s_64_tasks"),
            at("anchor_pairs_per_s_64_tasks"),
        );
        let ratio = ours / anchor;
        println!(
            "| 15. Redis hot pool, 64 tasks in 4 processes vs do-nothing script pairs | {ours:.0}/s | {anchor:.0}/s | {ratio:.2}x | >= 1x | {} |",
            judged(ratio >= 1.0)
        );
    }
    print_hot(
        18,
        "MySQL hot pool (count 8, 16 tasks in 4 processes) vs UPDATEs of random rows (pairs)",
        "anchor_pairs_per_s",
    );
    if let Some(v) = processes(18) {
        let [one, ours, many, anchor] = [
            "pairs_per_s_1_task",
            "pairs_per_s",
            "pairs_per_s_64_tasks",
            "anchor_pairs_per_s_64_tasks",
        ]
        .map(|key| v[key].as_f64().unwrap_or(f64::NAN));
        println!(
            "| 18. MySQL hot pool: 1 task, 16 tasks, 64 tasks (in 4 processes) | {one:.0}/s, {ours:.0}/s, {many:.0}/s | | | rising | {} |",
            judged(many >= ours && ours >= one)
        );
        let ratio = many / anchor;
        println!(
            "| 18. MySQL hot pool, 64 tasks vs UPDATEs of random rows (pairs, 64 tasks) | {many:.0}/s | {anchor:.0}/s | {ratio:.2}x | none | - |"
        );
    }
    print_wake(
        19,
        "MySQL (a ring; a 100 ms poll behind it) ",
        (100_000.0, 200_000.0),
    );
    match processes(20) {
        Some(modes) => {
            // NORMAL's goal is issue 55's; FULL's, where group commit
            // shares each fsync, the hot-pool issue's.
            for (mode, label, goal) in [("normal", "NORMAL", 1.0), ("full", "FULL", 2.0)] {
                let v = &modes[mode];
                let at = |key: &str| v[key].as_f64().unwrap_or(f64::NAN);
                let [one, sixteen, many] =
                    ["pairs_per_s_1_task", "pairs_per_s", "pairs_per_s_64_tasks"].map(at);
                let ratio = sixteen / one;
                println!(
                    "| 20. SQLite {label} hot pool (count 8): 16 tasks in 4 processes vs 1 task in 1 process | {sixteen:.0}/s | {one:.0}/s | {ratio:.2}x | >= {goal}x | {} |",
                    judged(ratio >= goal)
                );
                println!(
                    "| 20. SQLite {label}: busy retries (pauses on a locked file) per pair at 1, 16, 64 tasks | {:.3}, {:.3}, {:.3} | | | none | - |",
                    at("busy_retries_per_pair_1_task"),
                    at("busy_retries_per_pair_16_tasks"),
                    at("busy_retries_per_pair_64_tasks"),
                );
                println!(
                    "| 20. SQLite {label} hot pool: 64 tasks in 4 processes | {many:.0}/s | | {:.2}x | none | - |",
                    many / one
                );
                let [raw_one, raw, batched] = [
                    "raw_pairs_per_s_1_task",
                    "raw_pairs_per_s_16_tasks",
                    "batched_pairs_per_s_16_tasks",
                ]
                .map(at);
                println!(
                    "| 20p. SQLite {label}, the bare design (raw pairs, one writer at a time): 16 tasks in 4 processes vs 1 task; with group commit | {raw:.0}/s; {batched:.0}/s | {raw_one:.0}/s | {:.2}x; {:.2}x | none | - |",
                    raw / raw_one,
                    batched / raw_one
                );
                if at("batches_16_tasks") > 0.0 {
                    println!(
                        "| 20. SQLite {label}: writes per batch at 1, 16, 64 tasks | {:.2}, {:.2}, {:.2} | | | none | - |",
                        at("writes_per_batch_1_task"),
                        at("writes_per_batch_16_tasks"),
                        at("writes_per_batch_64_tasks"),
                    );
                }
            }
        }
        None => println!("| 20. SQLite hot pool | not run | | | | |"),
    }
    many::print_line22();
    many::print_line23();
    match processes(21) {
        Some(v) => {
            let [python, rust, floor] = [
                "python_pairs_per_s",
                "rust_pairs_per_s",
                "python_floor_pairs_per_s",
            ]
            .map(|key| v[key].as_f64().unwrap_or(f64::NAN));
            let ratio = python / floor;
            println!(
                "| 21. SQLite extension from Python: pair vs two one-row UPDATEs from Python | {python:.0}/s | {floor:.0}/s | {ratio:.2}x | >= 0.7x | {} |",
                judged(ratio >= 0.7)
            );
            println!(
                "| 21. SQLite extension from Python vs the same pair from Rust, same file | {python:.0}/s | {rust:.0}/s | {:.2}x | none | - |",
                python / rust
            );
        }
        None => println!("| 21. SQLite extension from Python | not run | | | | |"),
    }
    match processes(11) {
        Some(v) => {
            for (store, goal) in [("memory", Some(0.5)), ("sqlite", None)] {
                let ours = v[store]["requests_per_s"].as_f64().unwrap_or(f64::NAN);
                let ceiling = v[store]["ceiling_requests_per_s"]
                    .as_f64()
                    .unwrap_or(f64::NAN);
                let ratio = ours / ceiling;
                let (goal, met) = match goal {
                    Some(g) => (format!(">= {g}x"), judged(ratio >= g)),
                    None => ("none".to_string(), "-"),
                };
                println!(
                    "| 11. HTTP borrow+return ({store}) vs a do-nothing axum handler, wrk keep-alive | {ours:.0} req/s | {ceiling:.0} req/s | {ratio:.2}x | {goal} | {met} |"
                );
            }
        }
        None => println!("| 11. HTTP pairs | not run | | | | |"),
    }
    match processes(12) {
        Some(v) => {
            let n = v["hand_offs"].as_u64().unwrap_or(0);
            let p50 = v["p50_us"].as_f64().unwrap_or(f64::NAN);
            let p99 = v["p99_us"].as_f64().unwrap_or(f64::NAN);
            println!(
                "| 12. HTTP waiting borrow woken by another client's return, p50 over {n} | {} | | | <= 1 ms | {} |",
                time(p50 * 1e3),
                judged(p50 <= 1_000.0)
            );
            println!(
                "| 12. HTTP waiting borrow woken by another client's return, p99 over {n} | {} | | | none | - |",
                time(p99 * 1e3)
            );
        }
        None => println!("| 12. HTTP wake | not run | | | | |"),
    }
}

/// A hot-pool line (13, 15, 18): pairs/s against the anchor's rate under
/// `anchor_key`, goal 0.4x.
/// Line 13, PostgreSQL's hot pool: pairs per second at 1, 16 and 64 tasks
/// against one-row `UPDATE` commits at 1 and 16 clients, and what the
/// server did per pair at one task.
fn print_line13() {
    let Some(v) = processes(13) else {
        println!("| 13. PostgreSQL hot pool | not run | | | | |");
        return;
    };
    let at = |key: &str| v[key].as_f64().unwrap_or(f64::NAN);
    for (tasks, ours, anchor, clients, goal) in [
        (
            "1 task",
            "pairs_per_s_1_task",
            "anchor_commits_per_s_1_client",
            "1 client",
            0.33,
        ),
        (
            "16 tasks in 4 processes",
            "pairs_per_s",
            "anchor_commits_per_s",
            "16 clients",
            0.25,
        ),
    ] {
        let (ours, anchor) = (at(ours), at(anchor));
        let ratio = ours / anchor;
        println!(
            "| 13. PostgreSQL hot pool (count 8), {tasks} vs one-row UPDATE commits ({clients}) | {ours:.0}/s | {anchor:.0}/s | {ratio:.2}x | >= {goal}x | {} |",
            judged(ratio >= goal)
        );
    }
    let (sixteen, many) = (at("pairs_per_s"), at("pairs_per_s_64_tasks"));
    println!(
        "| 13. PostgreSQL hot pool, 64 tasks in 4 processes vs 16 | {many:.0}/s | {sixteen:.0}/s | {:.2}x | >= 1x | {} |",
        many / sixteen,
        judged(many >= sixteen)
    );
    let profile = &v["profile"];
    let per = |run: &str, key: &str| profile[run][key].as_f64().unwrap_or(f64::NAN);
    let statements = per("ours_1", "statements") + per("ours_1", "statements_in_functions");
    println!(
        "| 13. PostgreSQL per pair at 1 task: transactions; statements (top-level and nested) | {:.2}; {statements:.2} | | | <= 2.2; <= 4 | {} |",
        per("ours_1", "transactions"),
        // (The workers' connect and heartbeats add about 0.01.)
        judged(per("ours_1", "transactions") <= 2.2 && statements < 4.05)
    );
    println!(
        "| 13. PostgreSQL server CPU per pair at 1, 16, 64 tasks; per anchor commit (16 clients) | {:.0}, {:.0}, {:.0} µs | {:.0} µs | | none | - |",
        per("ours_1", "server_cpu_us"),
        per("ours_16", "server_cpu_us"),
        per("ours_64", "server_cpu_us"),
        per("anchor", "server_cpu_us"),
    );
}

fn print_hot(line: u32, label: &str, anchor_key: &str) {
    let Some(v) = processes(line) else {
        println!(
            "| {line}. {} | not run | | | | |",
            label.split(" (").next().unwrap_or(label)
        );
        return;
    };
    let ours = v["pairs_per_s"].as_f64().unwrap_or(f64::NAN);
    let anchor = v[anchor_key].as_f64().unwrap_or(f64::NAN);
    let ratio = ours / anchor;
    println!(
        "| {line}. {label} | {ours:.0}/s | {anchor:.0}/s | {ratio:.2}x | >= 0.4x | {} |",
        judged(ratio >= 0.4)
    );
}

/// A cross-process wake line (5, 10, 16) of the store `store` ("" for
/// SQLite): p50 and p99 against `goals_us`, and the idle waiter's CPU.
fn print_wake(line: u32, store: &str, goals_us: (f64, f64)) {
    let Some(v) = processes(line) else {
        println!("| {line}. {store}cross-process wake | not run | | | | |");
        return;
    };
    let n = v["hand_offs"].as_u64().unwrap_or(0);
    for (key, label, goal_us) in [("p50_us", "p50", goals_us.0), ("p99_us", "p99", goals_us.1)] {
        let us = v[key].as_f64().unwrap_or(f64::NAN);
        println!(
            "| {line}. {store}cross-process wake, {label} over {n} hand-offs | {} | | | <= {} | {} |",
            time(us * 1e3),
            time(goal_us * 1e3),
            judged(us <= goal_us)
        );
    }
    let idle = v["idle_cpu_share"].as_f64().unwrap_or(f64::NAN) * 100.0;
    println!(
        "| {line}. {store}idle waiter, CPU per second waiting | {idle:.3}% of a core | | | <= 0.1% | {} |",
        judged(idle <= 0.1)
    );
}

/// Mean time per iteration in nanoseconds, from criterion's estimates.
fn mean_ns(group: &str, bench: &str) -> Option<f64> {
    let path = criterion_dir()
        .join(group)
        .join(bench)
        .join("new/estimates.json");
    let text = std::fs::read_to_string(path).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    json["mean"]["point_estimate"].as_f64()
}

fn time(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.1} µs", ns / 1e3)
    } else {
        format!("{ns:.1} ns")
    }
}

fn main() {
    println!("| line | ours | anchor (same run) | ratio | goal | met |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for line in LINES {
        let (Some(anchor), Some(ours)) = (
            mean_ns(line.group, line.anchor),
            mean_ns(line.group, line.ours),
        ) else {
            println!("| {} | not run | | | | |", line.name);
            continue;
        };
        let (ratio, goal, met) = match line.goal {
            Goal::TimeAtMost(g) => (
                ours / anchor,
                format!("<= {g}x time"),
                Some(ours / anchor <= g),
            ),
            Goal::ThroughputAtLeast(g) => {
                (anchor / ours, format!(">= {g}x"), Some(anchor / ours >= g))
            }
            Goal::None => (anchor / ours, "none".to_string(), None),
        };
        let met = met.map_or("-", judged);
        println!(
            "| {} | {} | {} | {ratio:.2}x | {goal} | {met} |",
            line.name,
            time(ours),
            time(anchor)
        );
    }
    print_processes();
}
