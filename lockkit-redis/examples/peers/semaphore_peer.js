// The peer of examples/peer_semaphore.rs: redis-semaphore's Semaphore (on ioredis), measured
// the way the example measures lockkit's, on the server it names. Run by the example:
//   node semaphore_peer.js URL KEY PERMITS CYCLES CLIENTS SECONDS
// It prints one line of JSON: the uncontended cycle's p50 and p99 (µs; one client acquires and
// releases CYCLES times), then CLIENTS clients, each on its own connection, acquiring and
// releasing for SECONDS: acquisitions per second, and each acquisition's wait p50 and max (µs).
'use strict';

const Redis = require('ioredis');
const { Semaphore } = require('redis-semaphore');

const [url, key, permitsArg, cyclesArg, clientsArg, secondsArg] = process.argv.slice(2);
const permits = Number(permitsArg);
const cycles = Number(cyclesArg);
const clients = Number(clientsArg);
const seconds = Number(secondsArg);
// A lease as long as lockkit's default; waits bounded well past the run.
const options = { lockTimeout: 30000, acquireTimeout: 600000 };

const micros = (start) => Number(process.hrtime.bigint() - start) / 1000;
function percentile(samples, q) {
  const sorted = Float64Array.from(samples).sort();
  return sorted[Math.min(sorted.length - 1, Math.round((sorted.length - 1) * q))];
}

async function uncontended() {
  const connection = new Redis(url);
  const semaphore = new Semaphore(connection, `${key}:alone`, permits, options);
  const samples = [];
  for (let i = 0; i < cycles; i++) {
    const start = process.hrtime.bigint();
    await semaphore.acquire();
    await semaphore.release();
    samples.push(micros(start));
  }
  connection.disconnect();
  return { cycle_p50_us: percentile(samples, 0.5), cycle_p99_us: percentile(samples, 0.99) };
}

// The server's main thread CPU (µs) and its count of commands (scripts count once; the
// commands a script calls count under their own names too, so EVALSHA/EVAL are left out of
// the sum and counted apart) so far.
async function serverStats(admin) {
  const info = await admin.info('all');
  let cpu = 0;
  let commands = 0;
  let scripts = 0;
  for (const line of info.split('\r\n')) {
    const cpuLine = /^used_cpu_(sys|user)_main_thread:([0-9.]+)/.exec(line);
    if (cpuLine) cpu += Number(cpuLine[2]) * 1e6;
    const stat = /^cmdstat_([a-z|]+):calls=([0-9]+)/.exec(line);
    if (stat && stat[1] !== 'info') {
      if (stat[1] === 'evalsha' || stat[1] === 'eval') scripts += Number(stat[2]);
      else commands += Number(stat[2]);
    }
  }
  return { cpu, commands, scripts };
}

async function contended() {
  const connections = Array.from({ length: clients }, () => new Redis(url));
  await Promise.all(connections.map((connection) => connection.ping()));
  const admin = new Redis(url);
  const serverBefore = await serverStats(admin);
  const cpuBefore = process.cpuUsage();
  const waits = [];
  const end = process.hrtime.bigint() + BigInt(Math.round(seconds * 1e9));
  const started = process.hrtime.bigint();
  await Promise.all(
    connections.map(async (connection) => {
      const semaphore = new Semaphore(connection, `${key}:shared`, permits, options);
      while (process.hrtime.bigint() < end) {
        const start = process.hrtime.bigint();
        await semaphore.acquire();
        waits.push(micros(start));
        await semaphore.release();
      }
    }),
  );
  const elapsed = micros(started) / 1e6;
  const cpu = process.cpuUsage(cpuBefore);
  const serverAfter = await serverStats(admin);
  connections.forEach((connection) => connection.disconnect());
  admin.disconnect();
  const per = (n) => n / Math.max(1, waits.length);
  return {
    client_cpu_us: per(cpu.user + cpu.system),
    server_cpu_us: per(serverAfter.cpu - serverBefore.cpu),
    scripts: per(serverAfter.scripts - serverBefore.scripts),
    commands: per(serverAfter.commands - serverBefore.commands),
    rate_per_s: waits.length / elapsed,
    wait_p50_us: percentile(waits, 0.5),
    wait_max_us: percentile(waits, 1),
  };
}

(async () => {
  const alone = await uncontended();
  const shared = await contended();
  process.stdout.write(`${JSON.stringify({ ...alone, ...shared })}\n`);
})().catch((error) => {
  process.stderr.write(`${error.stack || error}\n`);
  process.exit(1);
});
