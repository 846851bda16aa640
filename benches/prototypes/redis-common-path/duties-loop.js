// The hot loop that worker-full.js and worker-hash.js share: `tasks` tasks
// borrow (each its own waiter, its lease id fresh per borrow) and return at
// once from `startMs` for `seconds`, a refused borrow waiting for the
// hand-off's message on this process's `channel`; prints the pairs done.
// Their scripts take (KEYS, id, ttl, waiter, channel) and (KEYS, id).
function run({ client, sub, channel, me, K, tasks, startMs, seconds }) {
    const waiting = new Map();
    sub.on('message', (_ch, msg) => {
        const [id, pos, token] = msg.split(':');
        const w = waiting.get(id);
        if (w) { waiting.delete(id); w([Number(pos), Number(token)]); }
    });
    const start = Number(startMs), end = start + Number(seconds) * 1000;
    let done = 0, n = 0;
    async function borrow(waiter) {
        const id = me + (n++).toString(36);
        const granted = new Promise(resolve => waiting.set(id, resolve));
        const r = await client.borrow(...K, id, 30000, waiter, channel);
        if (r[0] >= 0) { waiting.delete(id); return id; }
        if (r[0] !== -1) throw new Error(`borrow: ${r[0]}`);
        await granted;
        return id;
    }
    async function task(i) {
        const waiter = `${me}.${i}`;
        while (Date.now() < end) {
            const id = await borrow(waiter);
            if (await client.giveback(...K, id) === 0) throw new Error('returned a lease not held');
            done += 1;
        }
    }
    sub.subscribe(channel).then(() => setTimeout(async () => {
        await Promise.all(Array.from({ length: Number(tasks) }, (_, i) => task(i)));
        console.log(done);
        client.disconnect(); sub.disconnect();
    }, Math.max(0, start - Date.now())));
}
module.exports = { run };
