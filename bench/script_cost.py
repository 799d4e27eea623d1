#!/usr/bin/env python3
"""script_cost.py - what redlockd's scripts cost a master, per call, in
microseconds of the master's own time (INFO commandstats).

    python3 bench/script_cost.py [--redis-server redis-server] [--n 20000] [--rounds 7]

Starts one redis-server on a free loopback port (no persistence), takes the
acquire and release scripts out of src/masters/scripts.c as redlockd sends them, and
runs each variant N times inside one EVAL (a Lua loop around the script's
body, so the network and the command parsing, the same for every variant,
stay out), in interleaved rounds; prints the median and the best round in
microseconds per run of the body. Variants:

* acquire of a new name (the key and its counter are deleted after each
  run) and of a reused name (the lock is deleted, the counter kept), each
  with the seed "0" (the masters' own rule, as before issue 22) and with a
  proposed seed (a new, increasing clock reading per run, within the bound),
  and each of those by a waiter (with a ticket: fair order, issue 30; the
  name is free, so nothing is queued, but the script looks);
* release with PUBLISH as shipped, with PUBLISH only when PUBSUB NUMSUB or
  NUMPAT says someone listens, and with no PUBLISH at all (no subscriber in
  any case).

It is a measurement, not a test; compare variants within one run.
"""
import argparse, os, re, socket, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from redis_local import redis_server  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def c_strings(block):
    return ''.join(re.findall(r'"((?:[^"\\]|\\.)*)"', block)).encode().decode('unicode_escape')


def scripts():
    src = open(os.path.join(ROOT, 'src', 'masters', 'scripts.c')).read()
    guard = c_strings(src[src.index('#define GUARD'):src.index('/* n is a counter')])
    bad = lambda n: '(not %s or %s < 0 or %s >= 9007199254740991 or %s ~= math.floor(%s))' % ((n,) * 5)
    a = src[src.index('mscript script_acquire'):src.index('mscript script_dequeue')]
    a = a.replace('GUARD', '').replace('" COUNTER_BAD("f") "', bad('f')).replace('" SCRIPT_QUEUE_RETRY_MS "', '100')
    acquire = guard + c_strings(a.split('"acquire",', 1)[1].rsplit(', "",', 1)[0])
    r = src[src.index('#define RELEASE_BODY'):src.index('#define MATCH_TOKEN')]
    release = c_strings(r).replace('if v and () then', 'if v and (v == ARGV[1]) then')
    return acquire, release


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--redis-server', default='redis-server')
    ap.add_argument('--n', type=int, default=20000)
    ap.add_argument('--rounds', type=int, default=7)
    o = ap.parse_args()
    with redis_server(o.redis_server) as port:

        def cli(*a):
            return subprocess.run(['redis-cli', '-p', str(port)] + list(a), capture_output=True,
                                  text=True).stdout.strip()

        cli('HSET', 'redlockd#marker', 'state', 'ready', 'until', '0')
        acquire, release = scripts()
        publish = "if ARGV[3] ~= '' then redis.call('PUBLISH', ARGV[3], KEYS[1] .. '\\n' .. v) end"
        if publish not in release:
            sys.exit('script_cost: the release script no longer has the PUBLISH line this compares')
        gated = ("if ARGV[3] ~= '' and (redis.call('PUBSUB', 'NUMSUB', ARGV[3])[2] > 0 "
                 "or redis.call('PUBSUB', 'NUMPAT') > 0) then redis.call('PUBLISH', ARGV[3], KEYS[1] .. '\\n' .. v) end")
        wrap = lambda body: 'local function body(KEYS, ARGV)\n' + body + '\nend\n'
        clock = 'local tt = redis.call("TIME") local base = tonumber(tt[1]) * 1000000 + tonumber(tt[2])\n'
        variants = {}
        for pat in ('new', 'reused'):
            for seed in ('0', 'proposed'):
                for waiting in (False, True):
                    key = "'k' .. i" if pat == 'new' else "'same'"
                    seed_expr = "'0'" if seed == '0' else "string.format('%d', base + i)"
                    cleanup = "redis.call('DEL', k, k .. '#fence')" if pat == 'new' else "redis.call('DEL', k)"
                    ticket = "'tk', string.format('%d', base + i), '5000'" if waiting else "'', '0', '0'"
                    variants['acquire, %s name, seed %s%s' % (pat, seed, ', a waiter (ticket)' if waiting else '')] = (
                        wrap(acquire) + clock + 'for i = 1, tonumber(ARGV[1]) do local k = %s\n'
                        "local r = body({k, k .. '#fence', k .. '#owner', k .. '#queue', k .. '#qdl', 'redlockd#marker'}, "
                        "{'tok', '30000', '90000', '', %s, '1000000', %s, '1'}) assert(r[1] == 1)\n%s end return 1"
                        % (key, seed_expr, ticket, cleanup))
        for label, body in (('as shipped (PUBLISH)', release), ('PUBLISH only to subscribers', release.replace(publish, gated)),
                            ('no PUBLISH', release.replace(publish, ''))):
            variants['release, %s' % label] = (
                wrap(body) + 'for i = 1, tonumber(ARGV[1]) do redis.call("SET", "same", "tok") '
                'local r = body({"same", "same#owner"}, {"tok", "=", "redlockd:released:same"}) '
                'assert(r[1] == 1) end return 1')
        variants['baseline: SET + DEL of the lock only'] = (
            'for i = 1, tonumber(ARGV[1]) do redis.call("SET", "same", "tok") redis.call("DEL", "same") end return 1')
        res = {k: [] for k in variants}
        for _ in range(o.rounds):
            for k, code in variants.items():
                cli('CONFIG', 'RESETSTAT')
                out = cli('EVAL', code, '0', str(o.n))
                if out != '1':
                    sys.exit('script_cost: %s: %s' % (k, out))
                m = re.search(r'cmdstat_eval:calls=\d+,usec=(\d+)', cli('INFO', 'commandstats'))
                res[k].append(int(m.group(1)) / o.n)
        print('| variant | median us | best us |\n|---|---:|---:|')
        for k, v in res.items():
            v.sort()
            print('| %s | %.2f | %.2f |' % (k, v[len(v) // 2], v[0]))


if __name__ == '__main__':
    main()
