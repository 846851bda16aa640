//! Throwaway PostgreSQL, Redis and MariaDB servers for the Python tests,
//! when neither a `SEMAPHORE_*_URL` nor a local server is there
//! (`scripts/test-python` starts it): the Rust tests' own harness
//! (`testing::TestServer`, each store's `test-util` feature), which starts
//! them from the packages' binaries on unix sockets in temporary
//! directories.
//!
//! ```text
//! servers pg redis mysql   start those named, print VAR=url for each, then wait
//! ```
//!
//! It prints `SEMAPHORE_PG_URL=...` (and the others') once each server is
//! up, then `READY`, and keeps them until its standard input closes; the
//! harness's watchdogs stop them and remove their directories once this
//! process is gone, however it ended.

use std::io::{Read, Write};

fn main() {
    let mut out = std::io::stdout();
    for name in std::env::args().skip(1) {
        let (var, url) = match name.as_str() {
            "pg" => (
                "SEMAPHORE_PG_URL",
                semaphore_postgres::testing::TestServer::shared().url(),
            ),
            "redis" => (
                "SEMAPHORE_REDIS_URL",
                semaphore_redis::testing::TestServer::shared().url(),
            ),
            "mysql" => (
                "SEMAPHORE_MYSQL_URL",
                semaphore_mysql::testing::TestServer::shared().url(),
            ),
            other => {
                eprintln!("servers: unknown server {other:?} (pg, redis, mysql)");
                std::process::exit(2)
            }
        };
        writeln!(out, "{var}={url}").expect("writing to stdout");
    }
    writeln!(out, "READY").expect("writing to stdout");
    out.flush().expect("writing to stdout");
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
}
