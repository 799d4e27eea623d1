#!/usr/bin/env python3
"""group_cost.py - what group commit saves a master: its CPU per
acquire+release cycle when the scripts go one call each, or N to a call
(the group script), and node-redlock's commands for comparison.

    python3 bench/group_cost.py [--bodies build/bench/script_bodies] [--cycles 20000] [--rounds 5]

Starts one redis-server on a free loopback port (no persistence), takes the
scripts as the daemon builds them (build/bench/script_bodies prints them),
and sends acquire+release cycles on fresh names over one connection,
pipelined 200 commands a write (as redlockd's one connection per master
carries many requests' commands). Each variant runs in interleaved
rounds; printed: the master's CPU (INFO cpu, user + sys) per cycle in
microseconds, median and best round. Variants:

* alone: one EVALSHA of the acquire script, one of the release script (the
  path of a command with nothing else on its master);
* group of N: the acquires of N cycles in one call of the group script,
  then their releases in another;
* node-redlock's commands: SET NX PX, then its small release script.

It is a measurement, not a test; compare variants within one run.
"""
import argparse, hashlib, json, os, socket, subprocess, sys, time

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
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
    s.close()
    srv = subprocess.Popen([o.redis_server, '--port', str(port), '--bind', '127.0.0.1', '--save', '',
                            '--appendonly', 'no'], stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                c = Conn(port)
                break
            except OSError:
                time.sleep(0.05)
        node_release = ("if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) "
                        "else return 0 end")
        sha = {}
        for name, body in (('acquire', b['acquire']), ('release', b['release']), ('group', b['group']),
                           ('node_release', node_release)):
            sha[name] = c.run([enc('SCRIPT', 'LOAD', body)])[0].decode()
            assert sha[name] == hashlib.sha1(body.encode()).hexdigest()
        c.run([enc('HSET', 'redlockd#marker', 'state', 'ready', 'until', '0')])
        seed = [10 ** 15]
        fn = b['group_fn']

        def acq(i):
            k = 'n%d' % i
            seed[0] += 1
            return ('acquire', [k, k + '#fence', k + '#owner', 'redlockd#marker'],
                    ['tok%d' % i, '30000', '120000', '', str(seed[0]), str(10 ** 17), '1'])

        def rel(i):
            k = 'n%d' % i
            return ('release', [k, k + '#owner'], ['tok%d' % i, '=', ''])

        def group(ops):
            keys = [x for _, k, _ in ops for x in k]
            head = [len(ops)]
            for name, k, a in ops:
                head += [fn[name], len(k), len(a)]
            return enc('EVALSHA', sha['group'], len(keys), *keys, *head, *[x for _, _, a in ops for x in a])

        def commands(kind, n, first):
            out = []
            for j in range(first, first + o.cycles, 100):
                ids = range(j, j + 100)
                if kind == 'node':
                    out.append([enc('SET', 'n%d' % i, 'tok%d' % i, 'NX', 'PX', '30000') for i in ids])
                    out.append([enc('EVALSHA', sha['node_release'], 1, 'n%d' % i, 'tok%d' % i) for i in ids])
                elif n == 0:
                    out.append([enc('EVALSHA', sha[x[0]], len(x[1]), *x[1], *x[2]) for x in map(acq, ids)])
                    out.append([enc('EVALSHA', sha[x[0]], len(x[1]), *x[1], *x[2]) for x in map(rel, ids)])
                else:
                    out.append([group([acq(i) for i in ids[g:g + n]]) for g in range(0, 100, n)])
                    out.append([group([rel(i) for i in ids[g:g + n]]) for g in range(0, 100, n)])
            return out

        def cpu():
            info = c.run([enc('INFO', 'cpu')])[0].decode()
            vals = dict(l.split(':', 1) for l in info.splitlines() if ':' in l)
            return float(vals['used_cpu_user']) + float(vals['used_cpu_sys'])

        variants = [('alone: one call per script', 'script', 0)] + \
                   [('group of %d' % n, 'script', n) for n in (1, 2, 4, 10, 20, 50)] + \
                   [("node-redlock's commands (SET NX PX, small release script)", 'node', 0)]
        res = {v[0]: [] for v in variants}
        first = 0
        for _ in range(o.rounds):
            for label, kind, n in variants:
                batches = commands(kind, n, first)
                first += o.cycles
                c.run([enc('FLUSHALL')])
                c.run([enc('HSET', 'redlockd#marker', 'state', 'ready', 'until', '0')])
                t0 = cpu()
                for cmds in batches:
                    for r in c.run(cmds):
                        if isinstance(r, list) and r and isinstance(r[0], list) and r[0][:1] == [b'-1']:
                            sys.exit('group_cost: unexpected answer %r' % r)
                res[label].append((cpu() - t0) / o.cycles * 1e6)
        print('| variant | median us per cycle | best |\n|---|---:|---:|')
        for label, _, _ in variants:
            v = sorted(res[label])
            print('| %s | %.2f | %.2f |' % (label, v[len(v) // 2], v[0]))
    finally:
        srv.terminate()
        srv.wait()


if __name__ == '__main__':
    main()
