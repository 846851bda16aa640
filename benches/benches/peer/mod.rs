//! The peer of line 15: npm's `redis-semaphore` (5.x, on `ioredis`), the
//! most used Redis semaphore on npm, installed with npm into a scratch
//! folder of the bench's output on first use. Its workers run the same
//! hot loop as ours: acquire a slot of a pool of 8 (lock timeout 30 s, no
//! refresh, acquire timeout 10 s, its default 10 ms retry), release it.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::hot::{SECONDS, rate_with};

const PACKAGE: &str =
    r#"{ "private": true, "dependencies": { "redis-semaphore": "^5.6.0", "ioredis": "^5.4.0" } }"#;

/// argv: the server's unix socket, the pool's key, tasks, start (unix µs),
/// seconds. Prints the pairs done.
const WORKER: &str = r#"
const Redis = require('ioredis');
const { Semaphore } = require('redis-semaphore');
const [path, key, tasks, startUs, seconds] = process.argv.slice(2);
const client = new Redis({ path });
const start = Number(startUs) / 1000, end = start + Number(seconds) * 1000;
const options = { lockTimeout: 30000, refreshInterval: 0, acquireTimeout: 10000 };
let done = 0;
async function task() {
    while (Date.now() < end) {
        const semaphore = new Semaphore(client, key, 8, options);
        await semaphore.acquire();
        await semaphore.release();
        done += 1;
    }
}
setTimeout(async () => {
    await Promise.all(Array.from({ length: Number(tasks) }, task));
    console.log(done);
    client.disconnect();
}, Math.max(0, start - Date.now()));
"#;

/// The folder the peer is installed in, installing it if needed.
///
/// # Panics
/// If `npm` is missing or the install fails, saying so.
pub(crate) fn install(out: &Path) -> PathBuf {
    let dir = out.join("npm-redis-semaphore");
    std::fs::create_dir_all(&dir).expect("the peer's folder");
    std::fs::write(dir.join("package.json"), PACKAGE).expect("the peer's package.json");
    std::fs::write(dir.join("worker.js"), WORKER).expect("the peer's worker");
    if !dir.join("node_modules/redis-semaphore").exists() {
        let status = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--silent"])
            .current_dir(&dir)
            .status()
            .expect("line 15's peer needs node and npm (apt-get install nodejs npm)");
        assert!(status.success(), "npm install of redis-semaphore failed");
    }
    dir
}

/// The peer's pairs/s: `processes` node processes of `tasks` tasks each on
/// the server at unix socket `socket`, pool key `key`.
pub(crate) fn rate(dir: &Path, socket: &str, key: &str, processes: usize, tasks: usize) -> f64 {
    rate_with(processes, |start_us| {
        let mut command = Command::new("node");
        command.arg(dir.join("worker.js")).args([
            socket,
            key,
            &tasks.to_string(),
            &start_us.to_string(),
            &SECONDS.to_string(),
        ]);
        command
    })
}
