// node run.js <proto|anchor> <tasks> [seconds]: over min(4, tasks) processes (PROCS=n: fewer);
// prints the rate and the transactions committed per pair (or per anchor commit).
const { spawn } = require('child_process');
const { Client } = require('pg');
const [kind, tasks, seconds] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4] || 3)];
(async () => {
    const c = new Client({ host: '127.0.0.1', user: 'postgres', database: 'test' }); await c.connect();
    await c.query("UPDATE proto53.slots SET holder = NULL; DELETE FROM proto53.queue");
    const procs = Math.min(Number(process.env.PROCS || 4), tasks);
    const per = Array.from({ length: procs }, (_, i) => Math.floor(tasks / procs) + (i < tasks % procs ? 1 : 0));
    const start = Date.now() + 1500;
    const outs = per.map(t => new Promise(res => {
        const p = spawn('node', ['worker.js', kind, String(t), String(start), String(seconds)]);
        let o = ''; p.stdout.on('data', d => o += d); p.stderr.on('data', d => process.stderr.write(d)); p.on('close', () => res(Number(o.trim())));
    }));
    const xacts = async () => Number((await c.query("SELECT xact_commit FROM pg_stat_database WHERE datname = 'test'")).rows[0].xact_commit);
    await new Promise(res => setTimeout(res, start - Date.now()));
    const x0 = await xacts();
    const total = (await Promise.all(outs)).reduce((a, b) => a + b, 0);
    const x1 = await xacts();
    console.log(JSON.stringify({ kind, tasks, rate: total / seconds, xacts_per_unit: (x1 - x0) / total }));
    await c.end();
})();
