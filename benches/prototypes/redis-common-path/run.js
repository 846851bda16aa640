// node run.js <peer|proto|full|hash> <tasks> [seconds]: over min(4, tasks) processes, tasks spread;
// prints pairs/s and the server's CPU per pair (INFO cpu).
const { spawn } = require('child_process');
const Redis = require('ioredis');
const [kind, tasks, seconds] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4] || 3)];
(async () => {
    const r = new Redis({ host: '127.0.0.1', port: 6379 });
    const tag = Math.random().toString(36).slice(2, 10);
    if (kind === 'proto') {
        const k = s => `proto:{${tag}}:${s}`;
        for (let p = 0; p < 8; p++) await r.zadd(k('free'), p, String(p));
        await r.set(k('sess'), '1');
    }
    if (kind === 'full') {
        const k = s => `full:{${tag}}:${s}`;
        for (let p = 0; p < 8; p++) await r.zadd(k('free'), p, String(p));
        await r.hset(k('pool'), 'count', 8);
    }
    if (kind === 'hash') await r.hset(`hash:{${tag}}:pool`, 'count', 8, 'held', '00000000');
    const procs = Math.min(4, tasks);
    const per = Array.from({ length: procs }, (_, i) => Math.floor(tasks / procs) + (i < tasks % procs ? 1 : 0));
    const start = Date.now() + 1500;
    const cpu = async () => { const s = await r.info('cpu'); const m = s.match(/used_cpu_sys:([\d.]+)[\s\S]*used_cpu_user:([\d.]+)/); return Number(m[1]) + Number(m[2]); };
    const outs = per.map(t => new Promise(res => {
        const c = spawn('node', [`worker-${kind}.js`, kind === 'peer' ? `sem-${tag}` : tag, String(t), String(start), String(seconds)]);
        let o = ''; c.stdout.on('data', d => o += d); c.stderr.on('data', d => process.stderr.write(d)); c.on('close', () => res(Number(o.trim())));
    }));
    await new Promise(res => setTimeout(res, start - Date.now()));
    const c0 = await cpu();
    await new Promise(res => setTimeout(res, seconds * 1000));
    const c1 = await cpu();
    const total = (await Promise.all(outs)).reduce((a, b) => a + b, 0);
    console.log(JSON.stringify({ kind, tasks, rate: total / seconds, cpu_us_per_pair: (c1 - c0) * 1e6 / total }));
    r.disconnect();
})();
