//! The lines past one server: a million pools (22) and
//! Redis Cluster (23).

use super::{judged, processes, time};

/// Line 22: one pool among a million against one alone, per store.
pub(crate) fn print_line22() {
    match processes(22) {
        Some(stores) => {
            for (store, label) in [
                ("postgres", "PostgreSQL"),
                ("redis", "Redis"),
                ("mysql", "MySQL"),
            ] {
                let v = &stores[store];
                if v.is_null() {
                    continue;
                }
                let pools = v["pools"].as_f64().unwrap_or(f64::NAN);
                for (what, key, goal) in [
                    ("borrow+return pair", "pair_us", Some(1.5)),
                    ("register of a new pool", "register_us", None),
                    ("inspect", "inspect_us", None),
                    ("page of 100 listed", "page_us", None),
                ] {
                    let among = v["among"][key].as_f64().unwrap_or(f64::NAN);
                    let alone = v["alone"][key].as_f64().unwrap_or(f64::NAN);
                    let ratio = among / alone;
                    let (goal, met) = match goal {
                        Some(g) => (format!("<= {g}x"), judged(ratio <= g)),
                        None => ("none".to_string(), "-"),
                    };
                    println!(
                        "| 22. {label}, {what} among {pools:.0} pools vs one pool alone | {} | {} | {ratio:.2}x | {goal} | {met} |",
                        time(among * 1e3),
                        time(alone * 1e3),
                    );
                }
                let page_ms = v["among"]["page_us"].as_f64().unwrap_or(f64::NAN) / 1e3;
                println!(
                    "| 22. {label}, a page of 100 listed among {pools:.0} pools | {page_ms:.2} ms | | | <= 50 ms | {} |",
                    judged(page_ms <= 50.0)
                );
                println!(
                    "| 22. {label}, {pools:.0} pools: set-up time; bytes per pool | {:.0} s; {:.0} B | | | none | - |",
                    v["set_up_s"].as_f64().unwrap_or(f64::NAN),
                    v["bytes_per_pool"].as_f64().unwrap_or(f64::NAN),
                );
            }
        }
        None => println!("| 22. A million pools | not run | | | | |"),
    }
}

/// Line 23: Redis Cluster against one server, a replicated server and a one-node cluster.
pub(crate) fn print_line23() {
    match processes(23) {
        Some(v) => {
            for (shape, what, goal) in [
                ("spread", "48 pools over 3 masters, 48 tasks", None),
                ("hot", "a hot pool, 16 tasks", Some(0.8)),
            ] {
                let line = &v[shape];
                let rate = |t: &str| line[t]["pairs_per_s"].as_f64().unwrap_or(f64::NAN);
                let cpu = |t: &str, k: &str| line[t][k].as_f64().unwrap_or(f64::NAN);
                let ratio = rate("cluster") / rate("server");
                let (goal, met) = match goal {
                    Some(g) => (format!(">= {g}x"), judged(ratio >= g)),
                    None => ("none".to_string(), "-"),
                };
                println!(
                    "| 23. Redis Cluster vs one server, {what} | {:.0}/s | {:.0}/s | {ratio:.2}x | {goal} | {met} |",
                    rate("cluster"),
                    rate("server"),
                );
                println!(
                    "| 23. Redis, one server with a replica, {what} | {:.0}/s | {:.0}/s | {:.2}x | none | - |",
                    rate("replicated"),
                    rate("server"),
                    rate("replicated") / rate("server"),
                );
                println!(
                    "| 23. CPU per pair, {what}: masters + replicas; client (cluster vs one server) | {:.1} + {:.1} µs; {:.1} µs | {:.1} µs; {:.1} µs | | none | - |",
                    cpu("cluster", "masters_cpu_us_per_pair"),
                    cpu("cluster", "replicas_cpu_us_per_pair"),
                    cpu("cluster", "client_cpu_us_per_pair"),
                    cpu("server", "masters_cpu_us_per_pair"),
                    cpu("server", "client_cpu_us_per_pair"),
                );
            }
        }
        None => println!("| 23. Redis Cluster | not run | | | | |"),
    }
}
