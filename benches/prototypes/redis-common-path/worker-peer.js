// The peer: npm redis-semaphore, the hot loop of BENCHMARKS line 15 (benches/benches/peer),
// on TCP. node worker-peer.js <key> <tasks> <startMs> <seconds>: prints the pairs done.
const Redis = require('ioredis');
const { Semaphore } = require('redis-semaphore');
const [key, tasks, startMs, seconds] = process.argv.slice(2);
const client = new Redis({ host: '127.0.0.1', port: 6379 });
const start = Number(startMs), end = start + Number(seconds) * 1000;
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
