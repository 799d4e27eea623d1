#!/usr/bin/env node
// redlock-bench.js - the peer for build/bench/bench: node-redlock (npm
// "redlock" 4.2) over ioredis with auto-pipelining, five clients, one per
// master, as a user of the library would set it up.
//
//   node redlock-bench.js --masters h:p,h:p,h:p,h:p,h:p [--clients N]
//        [--seconds S] [--ttl-ms 30000] [--prefix nodebench] [--warmup-s 0.5]
//        [--no-wait] [--fresh]
//   node redlock-bench.js --check      # exit 0 when the pinned versions are installed
//
// N concurrent clients, each on its own lock name (with --fresh, a new name
// for every acquire: one lock per order id), run acquire (retryCount 0)
// then release for S seconds; the cycles in progress at the end are finished.
// After connecting and a warm-up (the same N clients cycling for --warmup-s
// seconds: the first call loads the scripts, and V8 compiles the hot path,
// as in a long-running service) it prints "ready" and waits for a line on standard input (the benchmark reads the
// masters' CPU then), unless --no-wait. Then it prints one line of JSON:
// cycles, cycles/s, acquire p50/p99/p99.9 in ms, errors and its own
// process CPU seconds (user + system) during the run.
'use strict';

const path = require('path');

function pinnedVersionsInstalled() {
  const want = require(path.join(__dirname, 'package.json')).dependencies;
  for (const [name, version] of Object.entries(want)) {
    let have;
    try {
      have = require(path.join(__dirname, 'node_modules', name, 'package.json')).version;
    } catch (e) {
      return `${name} is not installed`;
    }
    if (have !== version) return `${name} ${have} is installed, package.json pins ${version}`;
  }
  return null;
}

function parseArgs(argv) {
  const o = { masters: null, clients: 1, seconds: 5, ttlMs: 30000, prefix: 'nodebench', warmupS: 0.5, wait: true, check: false, fresh: false };
  for (let i = 2; i < argv.length; i++) {
    const a = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '--masters') o.masters = next();
    else if (a === '--clients') o.clients = parseInt(next(), 10);
    else if (a === '--seconds') o.seconds = parseFloat(next());
    else if (a === '--ttl-ms') o.ttlMs = parseInt(next(), 10);
    else if (a === '--prefix') o.prefix = next();
    else if (a === '--warmup-s') o.warmupS = parseFloat(next());
    else if (a === '--no-wait') o.wait = false;
    else if (a === '--check') o.check = true;
    else if (a === '--fresh') o.fresh = true;
    else throw new Error(`unknown argument ${a}`);
  }
  return o;
}

function pct(sorted, p) {
  if (sorted.length === 0) return 0;
  let k = Math.floor((p / 100) * sorted.length);
  if (k >= sorted.length) k = sorted.length - 1;
  return sorted[k] / 1000; // microseconds -> ms
}

function waitForLine() {
  return new Promise((resolve) => {
    let buf = '';
    const onData = (d) => {
      buf += d;
      if (buf.includes('\n')) {
        process.stdin.off('data', onData);
        process.stdin.pause();
        resolve();
      }
    };
    process.stdin.setEncoding('utf8');
    process.stdin.on('data', onData);
    process.stdin.once('end', () => resolve());
    process.stdin.resume();
  });
}

// N clients cycling for `seconds`, each on its own name, then finishing the
// cycle in progress.
let runs = 0;
async function runClients(redlock, o, seconds) {
  const runId = runs++;   // the warm-up's fresh names are not the run's
  let cycles = 0;
  let errors = 0;
  const lat = [];
  const t0 = process.hrtime.bigint();
  const end = t0 + BigInt(Math.round(seconds * 1e9));

  async function client(i) {
    let seq = 0;
    while (process.hrtime.bigint() < end) {
      const name = o.fresh ? `${o.prefix}:${i}:${runId}:${seq++}` : `${o.prefix}:${i}`;
      const a = process.hrtime.bigint();
      let lock;
      try {
        lock = await redlock.lock(name, o.ttlMs);
      } catch (e) {
        errors++;
        continue;
      }
      lat.push(Number(process.hrtime.bigint() - a) / 1000);
      try {
        await lock.unlock();
        cycles++;
      } catch (e) {
        errors++;
      }
    }
  }

  // An answer that never comes must not hang the benchmark.
  const guard = setTimeout(() => {
    process.stderr.write('redlock-bench: no answer within 10 s of the end\n');
    process.exit(1);
  }, seconds * 1000 + 10000);
  const workers = [];
  for (let i = 0; i < o.clients; i++) workers.push(client(i));
  await Promise.all(workers);
  clearTimeout(guard);
  return { cycles, errors, lat, elapsed: Number(process.hrtime.bigint() - t0) / 1e9 };
}

async function main() {
  const o = parseArgs(process.argv);
  const problem = pinnedVersionsInstalled();
  if (o.check) {
    if (problem) {
      process.stderr.write(`redlock-bench: ${problem}\n`);
      process.exit(3);
    }
    process.exit(0);
  }
  if (problem) throw new Error(`${problem} (run npm ci in ${__dirname})`);
  if (!o.masters) throw new Error('--masters is required');

  const Redis = require('ioredis');
  const Redlock = require('redlock');

  const clients = o.masters.split(',').map((hp) => {
    const i = hp.lastIndexOf(':');
    return new Redis({ host: hp.slice(0, i), port: parseInt(hp.slice(i + 1), 10), enableAutoPipelining: true });
  });
  await Promise.all(clients.map((c) => new Promise((resolve, reject) => {
    c.once('ready', resolve);
    c.once('error', reject);
  })));
  const redlock = new Redlock(clients, { retryCount: 0, driftFactor: 0.01 });
  const run = (seconds) => runClients(redlock, o, seconds);

  // Warm-up: the first EVALSHA answers NOSCRIPT and redlock sends EVAL.
  const warm = await redlock.lock(`${o.prefix}:warmup`, o.ttlMs);
  await warm.unlock();
  await run(o.warmupS);

  if (o.wait) {
    process.stdout.write('ready\n');
    await waitForLine();
  }

  const cpu0 = process.cpuUsage();
  const { cycles, errors, lat, elapsed } = await run(o.seconds);
  const cpu = process.cpuUsage(cpu0);

  lat.sort((x, y) => x - y);
  const out = {
    clients: o.clients,
    seconds: Number(elapsed.toFixed(3)),
    cycles,
    cycles_per_s: Number((cycles / elapsed).toFixed(1)),
    p50_ms: Number(pct(lat, 50).toFixed(3)),
    p99_ms: Number(pct(lat, 99).toFixed(3)),
    p999_ms: Number(pct(lat, 99.9).toFixed(3)),
    errors,
    cpu_s: Number(((cpu.user + cpu.system) / 1e6).toFixed(4)),
    max_rss_kib: process.resourceUsage().maxRSS,
    redlock: require('redlock/package.json').version,
    ioredis: require('ioredis/package.json').version,
    node: process.versions.node,
  };
  process.stdout.write(JSON.stringify(out) + '\n');
  await Promise.all(clients.map((c) => c.quit().catch(() => {})));
}

main().catch((e) => {
  process.stderr.write(`redlock-bench: ${e && e.message ? e.message : e}\n`);
  process.exit(1);
});
