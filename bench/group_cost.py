#!/usr/bin/env python3
"""group_cost.py - what group commit saves a master: its CPU per
extension+release of a held lock (what group calls carry: renewals, then
the release) when the scripts go one call each, or N to a call (the group
script), and node-redlock's extend and release scripts for comparison.

    python3 bench/group_cost.py [--bodies build/bench/script_bodies] [--cycles 20000] [--rounds 5]

Starts one redis-server on a free loopback port (no persistence), takes the
scripts as the daemon builds them (build/bench/script_bodies prints them),
sets CYCLES locks (untimed), then extends and releases each over one
connection, pipelined 100 commands a write (as redlockd's one connection
per master carries many requests' commands). Each variant runs in
interleaved rounds; printed: the master's CPU (INFO cpu, user + sys) per
extension+release in microseconds, median and best round. Variants:

* alone: one EVALSHA of the extend script, one of the release script (the
  path of a command with nothing else on its master);
* group of N: the extensions of N locks in one call of the group script,
  then their releases in another;
* node-redlock's extend and release scripts (GET, then PEXPIRE or DEL).

Acquires never go in a group (they take memory: scripts.h).

It is a measurement, not a test; compare variants within one run.
"""
import argparse, hashlib, json, os, socket, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from redis_local import redis_server  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def enc(*args):
    out = [b'*%d\r\n' % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b'$%d\r\n%s\r\n' % (len(a), a))
    return b''.join(out)


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(('127.0.0.1', port))
        self.f = self.s.makefile('rb')

    def reply(self):
        line = self.f.readline()
        t = line[:1]
        if t == b'-':
            raise RuntimeError(line.decode().strip())
        if t == b'$':
            n = int(line[1:])
            return self.f.read(n + 2)[:-2] if n >= 0 else None
        if t == b'*':
            return [self.reply() for _ in range(max(int(line[1:]), 0))]
        return line[1:].strip()

    def run(self, cmds):
        self.s.sendall(b''.join(cmds))
        return [self.reply() for _ in cmds]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--bodies', default=os.path.join(ROOT, 'build', 'bench', 'script_bodies'))
    ap.add_argument('--redis-server', default='redis-server')
    ap.add_argument('--cycles', type=int, default=20000)
    ap.add_argument('--rounds', type=int, default=5)
    o = ap.parse_args()
    b = json.loads(subprocess.run([o.bodies], capture_output=True, text=True, check=True).stdout)
    with redis_server(o.redis_server) as port:
        c = Conn(port)
        node_release = ("if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) "
                        "else return 0 end")
        node_extend = ("if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], "
                       "ARGV[2]) else return 0 end")
        sha = {}
        for name, body in (('extend', b['extend']), ('release', b['release']), ('group', b['group']),
                           ('node_release', node_release), ('node_extend', node_extend)):
            sha[name] = c.run([enc('SCRIPT', 'LOAD', body)])[0].decode()
            assert sha[name] == hashlib.sha1(body.encode()).hexdigest()
        fn = b['group_fn']

        def ext(i):
            k = 'n%d' % i
            return ('extend', [k, k + '#fence', k + '#owner', 'redlockd#marker'],
                    ['tok%d' % i, '30000', '120000', '1'])

        def rel(i):
            k = 'n%d' % i
            return ('release', [k, k + '#owner'], ['tok%d' % i, '=', ''])

        def group(ops):
            keys = [x for _, k, _ in ops for x in k]
            head = [len(ops)]
            for name, k, a in ops:
                head += [fn[name], len(k), len(a)]
            return enc('EVALSHA', sha['group'], len(keys), *keys, *head, *[x for _, _, a in ops for x in a])

        def held(first):
            """The locks (and fence counters) the timed commands extend and release."""
            out = []
            for j in range(first, first + o.cycles, 100):
                out.append([enc('SET', 'n%d' % i, 'tok%d' % i, 'PX', '30000') for i in range(j, j + 100)] +
                           [enc('SET', 'n%d#fence' % i, '5', 'PX', '120000') for i in range(j, j + 100)])
            return out

        def commands(kind, n, first):
            out = []
            for j in range(first, first + o.cycles, 100):
                ids = range(j, j + 100)
                if kind == 'node':
                    out.append([enc('EVALSHA', sha['node_extend'], 1, 'n%d' % i, 'tok%d' % i, '30000') for i in ids])
                    out.append([enc('EVALSHA', sha['node_release'], 1, 'n%d' % i, 'tok%d' % i) for i in ids])
                elif n == 0:
                    out.append([enc('EVALSHA', sha[x[0]], len(x[1]), *x[1], *x[2]) for x in map(ext, ids)])
                    out.append([enc('EVALSHA', sha[x[0]], len(x[1]), *x[1], *x[2]) for x in map(rel, ids)])
                else:
                    out.append([group([ext(i) for i in ids[g:g + n]]) for g in range(0, 100, n)])
                    out.append([group([rel(i) for i in ids[g:g + n]]) for g in range(0, 100, n)])
            return out

        def cpu():
            info = c.run([enc('INFO', 'cpu')])[0].decode()
            vals = dict(l.split(':', 1) for l in info.splitlines() if ':' in l)
            return float(vals['used_cpu_user']) + float(vals['used_cpu_sys'])

        variants = [('alone: one call per script', 'script', 0)] + \
                   [('group of %d' % n, 'script', n) for n in (1, 2, 4, 10, 20, 50)] + \
                   [("node-redlock's extend and release scripts", 'node', 0)]
        res = {v[0]: [] for v in variants}
        first = 0
        for _ in range(o.rounds):
            for label, kind, n in variants:
                c.run([enc('FLUSHALL')])
                c.run([enc('HSET', 'redlockd#marker', 'state', 'ready', 'until', '0')])
                for cmds in held(first):
                    c.run(cmds)
                batches = commands(kind, n, first)
                first += o.cycles
                t0 = cpu()
                for cmds in batches:
                    for r in c.run(cmds):
                        bad = r in (b'0', b'-1') or (isinstance(r, list) and r and
                                                     any(isinstance(x, list) and x[:1] in ([b'0'], [b'-1']) for x in r))
                        if bad:
                            sys.exit('group_cost: %s: a held lock was not extended or released: %r' % (label, r))
                res[label].append((cpu() - t0) / o.cycles * 1e6)
        print('| variant | median us per extend+release | best |\n|---|---:|---:|')
        for label, _, _ in variants:
            v = sorted(res[label])
            print('| %s | %.2f | %.2f |' % (label, v[len(v) // 2], v[0]))

if __name__ == '__main__':
    main()
