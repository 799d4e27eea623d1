// node-redlock (npm "redlock" 4.2 over ioredis, pinned in package.json) on
// the same masters as a redlockd with --key-prefix '': the other Redlock
// client of test_node_redlock.py. Reads one command per line on stdin:
//   try NAME      acquire NAME (ttl 10 s, no retry); prints {"ok":true} or
//                 {"ok":false,"error":...}, and keeps a lock it took
//   release NAME  releases the lock it took on NAME; prints {"ok":true}
//   quit
// Run: node node-redlock.js h:p,h:p,h:p,h:p,h:p
'use strict';

const readline = require('readline');
const Redis = require('ioredis');
const Redlock = require('redlock');

const clients = process.argv[2].split(',').map((hp) => {
  const i = hp.lastIndexOf(':');
  return new Redis({ host: hp.slice(0, i), port: parseInt(hp.slice(i + 1), 10) });
});
const redlock = new Redlock(clients, { retryCount: 0, driftFactor: 0.01 });
const held = new Map();
const say = (o) => console.log(JSON.stringify(o));

const rl = readline.createInterface({ input: process.stdin });
rl.on('line', async (line) => {
  const sp = line.indexOf(' ');
  const cmd = sp < 0 ? line : line.slice(0, sp);
  const name = sp < 0 ? '' : line.slice(sp + 1);
  try {
    if (cmd === 'try') {
      held.set(name, await redlock.lock(name, 10000));
      say({ ok: true });
    } else if (cmd === 'release') {
      await held.get(name).unlock();
      held.delete(name);
      say({ ok: true });
    } else if (cmd === 'quit') {
      await Promise.all(clients.map((c) => c.quit()));
      process.exit(0);
    }
  } catch (e) {
    say({ ok: false, error: String(e && e.message ? e.message : e) });
  }
});
