// The PostgreSQL hand-off design, bare: a row per slot claimed with FOR UPDATE SKIP LOCKED, a
// sequence for tokens, a queue table, the hand-off in the returning
// transaction, the head told by NOTIFY on its process's channel with the lease
// in the payload (no take), a look after queueing (a return that freed a slot
// before the place was visible). No sessions, no heartbeats.
// node worker.js <proto|anchor> <tasks> <startMs> <seconds>: prints pairs (or
// one-row UPDATE commits) done, and how each borrow was served (stderr).
const { Client } = require('pg');
const crypto = require('crypto');
const [kind, tasks, startMs, seconds] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4]), Number(process.argv[5])];
const conf = { host: '127.0.0.1', user: 'postgres', database: 'test' };
const me = 'w' + crypto.randomBytes(6).toString('hex');
const end = startMs + seconds * 1000;
// HOLD and THINK (ms, 0 by default): each holder holds its slot, then thinks, so long (line 26's cases).
const [hold, think] = [Number(process.env.HOLD || 0), Number(process.env.THINK || 0)];
const pause = ms => ms > 0 ? new Promise(res => setTimeout(res, ms)) : null;
const waiting = new Map();
let done = 0, n = 0; const stats = {direct: 0, recheck: 0, notified: 0, polled: 0, polls: 0};
async function main() {
    const clients = [];
    for (let i = 0; i < tasks; i++) { const c = new Client(conf); await c.connect(); clients.push(c); }
    let listener;
    if (kind === 'proto') {
        listener = new Client(conf); await listener.connect();
        listener.on('notification', m => {
            const [w, pos, token] = m.payload.split(':');
            const r = waiting.get(w); if (r) { waiting.delete(w); r(Number(pos)); }
        });
        await listener.query(`LISTEN ${me}`);
    }
    const task = async c => {
        if (kind === 'anchor') {
            while (Date.now() < end) { await c.query({ name: 'u', text: 'UPDATE proto53.anchor SET n = n + 1 WHERE id = $1', values: [1 + Math.floor(Math.random() * 1000)] }); done++; }
            return;
        }
        while (Date.now() < end) {
            const w = me + '_' + (n++).toString(36);
            const handed = new Promise(res => waiting.set(w, res));
            const r = await c.query({ name: 'b', text: 'SELECT pos, token FROM proto53.borrow($1, $2, 30000)', values: [w, me] });
            let pos = r.rows[0].pos;
            if (pos === null && !process.env.GATE) {
                // Queued in its own transaction: look once more, now that the
                // place is visible to every return (a return that freed a slot
                // before it was left it free, and this look takes it).
                const again = await c.query({ name: 'r', text: 'SELECT pos FROM proto53.recheck($1)', values: [w] });
                if (again.rows[0].pos !== null) { pos = again.rows[0].pos; stats.recheck++; }
            } else stats.direct++;
            if (pos === null) {
                // Wait for the hand-off; look again every 100 ms meanwhile (a lost wake-up).
                for (;;) {
                    const got = await Promise.race([handed, new Promise(res => setTimeout(() => res(null), 100))]);
                    if (got !== null) { pos = got; stats.notified++; break; }
                    stats.polls++;
                    const again = await c.query({ name: 'r', text: 'SELECT pos FROM proto53.recheck($1)', values: [w] });
                    if (again.rows[0].pos !== null) { pos = again.rows[0].pos; stats.polled++; break; }
                }
            }
            waiting.delete(w);
            await pause(hold);
            await c.query({ name: 'g', text: 'SELECT proto53.give_back($1, $2)', values: [pos, w] });
            done++;
            await pause(think);
        }
    };
    await new Promise(res => setTimeout(res, Math.max(0, startMs - Date.now())));
    await Promise.all(clients.map(task));
    console.log(done); console.error(JSON.stringify(stats));
    for (const c of clients) await c.end();
    if (listener) await listener.end();
}
main().catch(e => { console.error(e); process.exit(1); });
