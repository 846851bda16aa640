//! The commit ceilings that line 26 sets the PostgreSQL and MySQL stores
//! against (issue 70): how many one-row `UPDATE` commits a second the
//! server takes from [`CLIENTS`] clients of its own load tool, `pgbench` or
//! `mysqlslap` (from the servers' client packages). A pair is two commits
//! (a borrow and a return), so the ceiling in pairs is half of it.

use std::io::Write;
use std::process::Command;

use crate::median;

/// Clients each tool runs (line 26's 16 tasks).
pub const CLIENTS: u32 = 16;

/// `pgbench`'s commits a second: [`CLIENTS`] clients, each `UPDATE`-ing the
/// one row of `pgbench_branches` (made by `pgbench -i` at scale 1) for
/// `seconds`, on the server of libpq connection string `conninfo`.
///
/// # Errors
/// `pgbench` is missing or failed, or printed no `tps`.
pub fn pgbench_updates(conninfo: &str, seconds: u32) -> Result<f64, String> {
    pgbench(conninfo, CLIENTS, 1, seconds)
}

/// `pgbench`'s runs a second of a script of `statements` autocommitted
/// one-row `UPDATE`s (each a commit and a round trip: simple protocol),
/// from `clients` clients for `seconds`.
fn pgbench(conninfo: &str, clients: u32, statements: usize, seconds: u32) -> Result<f64, String> {
    let run = |args: &[&str]| {
        let out = Command::new("pgbench")
            .args(args)
            .arg(conninfo)
            .output()
            .map_err(|e| format!("pgbench: {e} (Debian: postgresql-client)"))?;
        match out.status.success() {
            true => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
            false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
        }
    };
    run(&["-i", "-s", "1", "-q"])?;
    let mut script = tempfile::NamedTempFile::new().map_err(|e| e.to_string())?;
    let update = "UPDATE pgbench_branches SET bbalance = bbalance + 1 WHERE bid = 1;\n";
    write!(script, "{}", update.repeat(statements)).map_err(|e| e.to_string())?;
    let clients = clients.to_string();
    let (seconds, file) = (seconds.to_string(), script.path().display().to_string());
    let out = run(&["-n", "-c", &clients, "-j", "2", "-T", &seconds, "-f", &file]);
    out?.lines()
        .find_map(|l| l.strip_prefix("tps = ")?.split(' ').next()?.parse().ok())
        .ok_or_else(|| "pgbench printed no tps".into())
}

/// `mysqlslap`'s commits a second: [`CLIENTS`] clients, `per_client`
/// autocommitted `UPDATE`s each of one InnoDB row, on the MariaDB server of
/// `url` (`mysql://root@localhost/<db>?socket=<path>`, the test server's).
///
/// # Errors
/// `mysqlslap` is missing or failed, or printed no time.
pub fn mysqlslap_updates(url: &str, per_client: u32) -> Result<f64, String> {
    let socket = url
        .split_once("socket=")
        .map(|(_, s)| s)
        .ok_or("a URL with a socket")?;
    mysqlslap(&[format!("--socket={socket}")], CLIENTS, per_client)
}

/// `mysqlslap`'s autocommitted one-row `UPDATE`s a second: `clients`
/// clients, `per_client` each, on the server that `connect` (its options)
/// reaches as root.
fn mysqlslap(connect: &[String], clients: u32, per_client: u32) -> Result<f64, String> {
    let out = Command::new("mysqlslap")
        .args(connect)
        .args([
            "--user=root",
            &format!("--concurrency={clients}"),
            "--iterations=1",
            &format!("--number-of-queries={}", per_client * clients),
            "--create-schema=semaphore_commits",
            "--delimiter=;",
            "--create=CREATE TABLE t (id INT PRIMARY KEY, n BIGINT) ENGINE=InnoDB;INSERT INTO t VALUES (1, 0)",
            "--query=UPDATE t SET n = n + 1 WHERE id = 1",
        ])
        .output()
        .map_err(|e| format!("mysqlslap: {e} (Debian: mariadb-client)"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let seconds: f64 = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| {
            let rest = l
                .trim()
                .strip_prefix("Average number of seconds to run all queries: ")?;
            rest.split(' ').next()?.parse().ok()
        })
        .ok_or("mysqlslap printed no time")?;
    Ok(f64::from(per_client * clients) / seconds)
}

/// Line 27's anchor for a store named `store` behind the proxy: one
/// client's pairs a second of two autocommitted one-row `UPDATE`s (two
/// commits, two round trips: what an uncontended borrow and return are at
/// least), through the same proxy. PostgreSQL by `pgbench` at `conninfo`
/// (3 s), MySQL by `mysqlslap` at 127.0.0.1:`port` over TCP (600
/// statements); `None` for another store.
pub fn two_updates(store: &str, conninfo: &str, port: u16) -> Option<Result<f64, String>> {
    match store {
        "PostgreSQL" => Some(pgbench(conninfo, 1, 2, 3)),
        "MySQL" => {
            let connect = [
                "--host=127.0.0.1".to_owned(),
                format!("--port={port}"),
                "--protocol=TCP".to_owned(),
            ];
            Some(mysqlslap(&connect, 1, 600).map(|updates| updates / 2.0))
        }
        _ => None,
    }
}

/// Line 27's anchor row under a store's zero-hold row: the anchor's median
/// pairs a second, and `ours` (the store's median) over it; none without
/// runs (a store without this anchor).
pub fn two_updates_row(name: &str, ours: f64, runs: Vec<Result<f64, String>>) -> Option<String> {
    if runs.is_empty() {
        return None;
    }
    Some(
        match runs.into_iter().collect::<Result<Vec<f64>, String>>() {
            Ok(runs) => {
                let anchor = median(runs);
                format!(
                    "| {name}: two one-row UPDATEs, 1 client, the same proxy | | {anchor:.0}/s; ours {:.2}x | |",
                    ours / anchor
                )
            }
            Err(e) => format!("| {name}: two UPDATEs | not measured: {} | | |", e.trim()),
        },
    )
}

/// Line 26's ceiling rows: `rounds` runs of each tool on the servers of
/// `postgres` (conninfo) and `mysql` (URL), medians, in commits and in
/// pairs a second; a tool that fails says why in its row.
pub fn ceiling_rows(postgres: &str, mysql: &str, rounds: usize) -> Vec<String> {
    let (mut pg, mut my) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        pg.push(pgbench_updates(postgres, 3));
        my.push(mysqlslap_updates(mysql, 400));
    }
    [("PostgreSQL (pgbench)", pg), ("MySQL (mysqlslap)", my)]
        .into_iter()
        .map(|(name, runs)| {
            let runs: Result<Vec<f64>, String> = runs.into_iter().collect();
            match runs {
                Ok(runs) => {
                    let commits = median(runs);
                    format!(
                        "| 26. {name}: one-row UPDATE commits at {CLIENTS} clients | | {commits:.0}/s; halved {:.0} pairs/s | |",
                        commits / 2.0
                    )
                }
                Err(e) => format!("| 26. {name} ceiling | not measured: {} | | |", e.trim()),
            }
        })
        .collect()
}
