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
    semaphore_benches::npm_folder(
        out,
        "npm-redis-semaphore",
        PACKAGE,
        &[("worker.js", WORKER)],
    )
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
